-- seqlease 8: the settings table, the defaults a fleet of processes shares
-- and an operator retunes without a redeploy (seqlease config get|set).
-- One row per setting set; a missing row means each process's Go Config or
-- the library default. Keys and values are checked by the writer (package
-- store's NormalizeSetting, package lease's ValidateSetting); the checks
-- here only bound what a stray write could leave.
CREATE TABLE settings (
    key        text        PRIMARY KEY CHECK (key ~ '^[a-z][a-z0-9_.]{0,99}$'),
    value      text        NOT NULL CHECK (octet_length(value) <= 200),
    updated_at timestamptz NOT NULL DEFAULT now(),
    updated_by text        NOT NULL DEFAULT '' CHECK (octet_length(updated_by) <= 1024)
);
