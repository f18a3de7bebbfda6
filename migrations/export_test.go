package migrations

import "io/fs"

// NewWithMigrations is New over an explicit list of migrations, so tests can
// exercise the runner with several versions.
func NewWithMigrations(cfg *Config, ms []Migration) (*Migrator, error) { return newMigrator(cfg, ms) }

// Parse exposes the file parser to the external tests.
func Parse(fsys fs.FS, dir string) ([]Migration, error) { return parse(fsys, dir) }
