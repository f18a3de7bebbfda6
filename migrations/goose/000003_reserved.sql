-- 000003_reserved: generated from sql/000003_reserved.{up,down}.sql by migrations.Migration.Goose; do not edit.
-- +goose Up
-- seqlease 3: reserved; it changes nothing.
SELECT 1;

-- +goose Down
SELECT 1;
