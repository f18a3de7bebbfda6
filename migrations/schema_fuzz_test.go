package migrations_test

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"regexp"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/jackc/pgx/v5"

	"github.com/seqlease/seqlease/migrations"
	"github.com/seqlease/seqlease/store/postgres"
)

// FuzzValidateSchema checks ValidateSchema against an independent statement
// of its rule, and that migrations.New and postgres.New agree with it: they
// refuse exactly the names it refuses, with an error that matches
// ErrInvalidSchema and names Config.Schema. An accepted name quotes to
// itself between double quotes: it cannot break out of the identifier.
func FuzzValidateSchema(f *testing.F) {
	for _, s := range []string{"seqlease", "public", "_x", "t_0123456789abcdef", "a1", strings.Repeat("a", 63),
		"", strings.Repeat("a", 64), "pg_catalog", "pg_temp", "information_schema", "Upper", "é", "schéma", "a b",
		"a.b", "a;b", `x"; DROP SCHEMA public CASCADE; --`, "x'; DROP TABLE entries; --", "with\x00nul", "\xff"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		valid := s != "" && len(s) <= 63 && plainIdentifier(s) && !strings.HasPrefix(s, "pg_") && s != "information_schema"
		err := migrations.ValidateSchema(s)
		switch {
		case valid && err != nil:
			t.Fatalf("ValidateSchema(%q) refused a valid name: %v", s, err)
		case !valid && err == nil:
			t.Fatalf("ValidateSchema(%q) accepted an invalid name", s)
		case err != nil && !errors.Is(err, migrations.ErrInvalidSchema):
			t.Fatalf("ValidateSchema(%q): %v does not match ErrInvalidSchema", s, err)
		}
		if valid {
			if q := (pgx.Identifier{s}).Sanitize(); q != `"`+s+`"` {
				t.Fatalf("%q quotes to %s", s, q)
			}
		}

		m, err := migrations.New(&migrations.Config{Schema: s})
		checkConstructor(t, "migrations.New", s, valid, err)
		if err == nil && m.Schema() != cmpOr(s, migrations.DefaultSchema) {
			t.Fatalf("migrations.New(%q).Schema() = %q", s, m.Schema())
		}
		_, err = postgres.New(nil, &postgres.Config{Schema: s}) // New does not touch the database
		checkConstructor(t, "postgres.New", s, valid, err)
	})
}

// checkConstructor checks a constructor's verdict on schema s; the empty
// schema means the default.
func checkConstructor(t *testing.T, what, s string, valid bool, err error) {
	t.Helper()
	valid = valid || s == ""
	switch {
	case valid && err != nil:
		t.Fatalf("%s(Schema %q): %v", what, s, err)
	case !valid && err == nil:
		t.Fatalf("%s(Schema %q) accepted an invalid schema", what, s)
	case err != nil && (!errors.Is(err, migrations.ErrInvalidSchema) || !strings.Contains(err.Error(), "Config.Schema")):
		t.Fatalf("%s(Schema %q): %v does not match ErrInvalidSchema or does not name Config.Schema", what, s, err)
	}
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// plainIdentifier: a lower-case letter or underscore, then lower-case
// letters, digits and underscores, byte by byte.
func plainIdentifier(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c == '_':
		case c >= '0' && c <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}

var migrationName = regexp.MustCompile(`^[a-z0-9_]+$`)

// FuzzParseMigrations feeds the migration-file parser a valid version 1 plus
// two fuzzed files (name and content). It must never panic; when it
// accepts, every file follows {version}_{name}.{up|down}.sql, versions run
// 1..N, and each migration is well formed.
func FuzzParseMigrations(f *testing.F) {
	f.Add("000002_two.up.sql", "CREATE TABLE b ();", "000002_two.down.sql", "DROP TABLE b;")
	f.Add("000002_two.up.sql", "x", "000002_deux.down.sql", "x")
	f.Add("2_two.up.sql", "x", "000002_two.down.sql", "x")
	f.Add("000001_one.up.sql", "again", "000002_two.down.sql", "x")
	f.Add("99999999999999999999_big.up.sql", "x", "-1_neg.down.sql", "x")
	f.Add("000002_Two.up.sql", "x", "000002_two.sql", "x")
	f.Add("000002_two.up.sql", " \n\t", "000002_two.down.sql", "x")
	f.Add("sub/000002_two.up.sql", "x", "../000002_two.down.sql", "x")
	f.Add("000002_two.up.sql\x00", "x", "000002_tw\xffo.down.sql", "x")
	f.Fuzz(func(t *testing.T, name1, body1, name2, body2 string) {
		fsys := fstest.MapFS{
			"sql/000001_one.up.sql":   {Data: []byte("CREATE TABLE a ();")},
			"sql/000001_one.down.sql": {Data: []byte("DROP TABLE a;")},
		}
		fsys["sql/"+name1] = &fstest.MapFile{Data: []byte(body1)}
		fsys["sql/"+name2] = &fstest.MapFile{Data: []byte(body2)}
		ms, err := migrations.Parse(fsys, "sql")
		if err != nil {
			if ms != nil {
				t.Fatalf("Parse failed (%v) but returned migrations", err)
			}
			return
		}
		files := 0
		for i, m := range ms {
			if m.Version != i+1 {
				t.Fatalf("migration %d has version %d", i, m.Version)
			}
			if !migrationName.MatchString(m.Name) {
				t.Fatalf("version %d has name %q", m.Version, m.Name)
			}
			if strings.TrimSpace(m.Up) == "" || strings.TrimSpace(m.Down) == "" {
				t.Fatalf("version %d has an empty file", m.Version)
			}
			sum := sha256.Sum256([]byte(m.Up))
			if m.Checksum != hex.EncodeToString(sum[:]) {
				t.Fatalf("version %d: checksum %s", m.Version, m.Checksum)
			}
			files += 2
		}
		// Every file in sql/ became half of a migration: none was ignored.
		inDir := 0
		for p := range fsys {
			if rest, ok := strings.CutPrefix(p, "sql/"); ok && rest != "" && !strings.Contains(rest, "/") {
				inDir++
			}
		}
		if inDir != files {
			t.Fatalf("%d files in sql/, %d migrations of 2 files each: %v", inDir, len(ms), ms)
		}
	})
}
