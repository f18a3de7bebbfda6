ALTER TABLE leases DROP COLUMN wanted_until;
