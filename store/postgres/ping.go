package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/seqlease/seqlease/store"
)

// Ping proves that the database is reachable and takes this Store's
// writes, in one round trip that changes nothing: an UPDATE of the
// schema's streams table that matches no row. PostgreSQL checks that a
// write may run before it looks for rows, so the statement fails on a hot
// standby and in a read-only session, and it needs the schema migrated
// and the privilege to write it; matching nothing, it takes no row lock,
// is given no transaction id and writes no WAL. It takes the table's
// ROW EXCLUSIVE lock for the instant of the statement, which waits only
// for a migration that holds the table.
//
// A read-only server fails with an error matching store.ErrReadOnly that says
// whether it is a standby (pg_is_in_recovery(), a second query); a
// schema not migrated with ErrSchemaMissing; a context that ended with
// its error.
func (s *Store) Ping(ctx context.Context) error {
	probe := `UPDATE ` + pgx.Identifier{s.channel}.Sanitize() + `.streams SET last_number = last_number WHERE false`
	_, err := s.db.Exec(ctx, probe)
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "25006" { // read_only_sql_transaction
		if err != nil {
			return interpretError("ping", err)
		}
		return nil
	}
	var standby bool
	if err := s.db.QueryRow(ctx, `SELECT pg_is_in_recovery()`).Scan(&standby); err != nil {
		return fmt.Errorf("ping: %w: %s (and pg_is_in_recovery() failed: %v)", store.ErrReadOnly, pgErr.Message, err)
	}
	if standby {
		return fmt.Errorf("ping: %w: it is a hot standby (pg_is_in_recovery() is true): "+
			"connect to the primary, e.g. with target_session_attrs=read-write in a multi-host URL", store.ErrReadOnly)
	}
	return fmt.Errorf("ping: %w: the session is read-only (%s): check default_transaction_read_only "+
		"for this role, database or connection", store.ErrReadOnly, pgErr.Message)
}
