package migrations

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// sqlFS holds the migration files, named {version}_{name}.{up|down}.sql.
//
//go:embed sql/*.sql
var sqlFS embed.FS

// embedded is the parsed content of sqlFS. A malformed set of files is a
// defect of the build, not a runtime condition: parsing panics, and the unit
// tests of this package catch it before any release.
var embedded = mustParse(sqlFS, "sql")

// Migration is one versioned schema change.
type Migration struct {
	// Version is the migration's number: 1, 2, ... without gaps.
	Version int
	// Name is the title part of the file name, e.g. "streams_entries".
	Name string
	// Up is the SQL that applies the migration.
	Up string
	// Down is the SQL that reverts it.
	Down string
	// Checksum is the lower-case hex sha256 of Up; it is recorded when the
	// migration is applied and verified by every later Up.
	Checksum string
}

// String returns the migration's file stem, e.g. "000001_streams_entries".
func (m Migration) String() string { return fmt.Sprintf("%06d_%s", m.Version, m.Name) }

// Goose returns the migration as one file in goose's format: Up under
// "-- +goose Up" and Down under "-- +goose Down". The files in
// migrations/goose are these texts (a test keeps them equal), for teams that
// apply their schema with goose. The SQL has no statement that needs goose's
// StatementBegin/End: every statement ends with a semicolon at the end of a
// line.
func (m Migration) Goose() string {
	return "-- " + m.String() + ": generated from sql/" + m.String() + ".{up,down}.sql by migrations.Migration.Goose; do not edit.\n" +
		"-- +goose Up\n" + m.Up + "\n-- +goose Down\n" + m.Down
}

// Migrations returns the migrations embedded in this binary, in version
// order. The slice is a copy; callers may keep or modify it.
func Migrations() []Migration { return slices.Clone(embedded) }

// fileRE matches a migration file name, golang-migrate's convention.
var fileRE = regexp.MustCompile(`^([0-9]+)_([a-z0-9_]+)\.(up|down)\.sql$`)

func mustParse(fsys fs.FS, dir string) []Migration {
	ms, err := parse(fsys, dir)
	if err != nil {
		panic(err)
	}
	return ms
}

// parse reads the migration files in dir of fsys. It requires every file to
// follow the naming convention, an up and a down file per version, one name
// per version, non-empty SQL, and versions 1..N without gaps.
func parse(fsys fs.FS, dir string) ([]Migration, error) {
	entries, err := fs.ReadDir(fsys, dir)
	if err != nil {
		return nil, fmt.Errorf("migrations: read %s: %w", dir, err)
	}
	type pair struct {
		name     string
		up, down *string
	}
	byVersion := map[int]*pair{}
	for _, e := range entries {
		if e.IsDir() {
			return nil, fmt.Errorf("migrations: unexpected directory %s", e.Name())
		}
		sub := fileRE.FindStringSubmatch(e.Name())
		if sub == nil {
			return nil, fmt.Errorf("migrations: file %s does not match {version}_{name}.{up|down}.sql", e.Name())
		}
		version, err := strconv.Atoi(sub[1])
		if err != nil || version < 1 {
			return nil, fmt.Errorf("migrations: file %s: version must be a positive integer", e.Name())
		}
		body, err := fs.ReadFile(fsys, path.Join(dir, e.Name()))
		if err != nil {
			return nil, fmt.Errorf("migrations: read %s: %w", e.Name(), err)
		}
		text := string(body)
		if strings.TrimSpace(text) == "" {
			return nil, fmt.Errorf("migrations: file %s is empty", e.Name())
		}
		p := byVersion[version]
		if p == nil {
			p = &pair{name: sub[2]}
			byVersion[version] = p
		}
		if p.name != sub[2] {
			return nil, fmt.Errorf("migrations: version %d has two names: %s and %s", version, p.name, sub[2])
		}
		slot := &p.up
		if sub[3] == "down" {
			slot = &p.down
		}
		if *slot != nil {
			return nil, fmt.Errorf("migrations: duplicate %s file for version %d (%s)", sub[3], version, e.Name())
		}
		*slot = &text
	}
	if len(byVersion) == 0 {
		return nil, fmt.Errorf("migrations: no migration files in %s", dir)
	}
	ms := make([]Migration, 0, len(byVersion))
	for v := 1; v <= len(byVersion); v++ {
		p := byVersion[v]
		if p == nil {
			return nil, fmt.Errorf("migrations: version %d is missing: versions must be 1..%d without gaps", v, len(byVersion))
		}
		if p.up == nil {
			return nil, fmt.Errorf("migrations: version %d (%s) has no up file", v, p.name)
		}
		if p.down == nil {
			return nil, fmt.Errorf("migrations: version %d (%s) has no down file", v, p.name)
		}
		sum := sha256.Sum256([]byte(*p.up))
		ms = append(ms, Migration{
			Version:  v,
			Name:     p.name,
			Up:       *p.up,
			Down:     *p.down,
			Checksum: hex.EncodeToString(sum[:]),
		})
	}
	return ms, nil
}
