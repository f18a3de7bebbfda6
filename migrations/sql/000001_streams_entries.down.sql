DROP TABLE lease_history;
DROP TABLE leases;
DROP TABLE entries;
DROP TABLE streams;
