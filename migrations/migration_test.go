package migrations

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io/fs"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/require"
)

func TestEmbeddedMigrationsAreWellFormed(t *testing.T) {
	t.Parallel()
	ms, err := parse(sqlFS, "sql")
	require.NoError(t, err)
	require.NotEmpty(t, ms)
	require.Equal(t, ms, Migrations())
	for i, m := range ms {
		require.Equal(t, i+1, m.Version, "versions must run 1..N")
		require.Regexp(t, `^[a-z0-9_]+$`, m.Name)
		require.NotEmpty(t, strings.TrimSpace(m.Up))
		require.NotEmpty(t, strings.TrimSpace(m.Down))
		sum := sha256.Sum256([]byte(m.Up))
		require.Equal(t, hex.EncodeToString(sum[:]), m.Checksum)
	}
	require.Equal(t, "000001_streams_entries", ms[0].String())
}

func TestMigrationsReturnsACopy(t *testing.T) {
	t.Parallel()
	ms := Migrations()
	ms[0].Up = "tampered"
	require.NotEqual(t, "tampered", Migrations()[0].Up)
}

func file(s string) *fstest.MapFile { return &fstest.MapFile{Data: []byte(s)} }

func TestParse(t *testing.T) {
	t.Parallel()
	good := fstest.MapFS{
		"sql/000002_two.up.sql":   file("CREATE TABLE b ();"),
		"sql/000001_one.up.sql":   file("CREATE TABLE a ();"),
		"sql/000001_one.down.sql": file("DROP TABLE a;"),
		"sql/000002_two.down.sql": file("DROP TABLE b;"),
	}
	ms, err := parse(good, "sql")
	require.NoError(t, err)
	require.Len(t, ms, 2)
	require.Equal(t, 1, ms[0].Version)
	require.Equal(t, "one", ms[0].Name)
	require.Equal(t, "CREATE TABLE a ();", ms[0].Up)
	require.Equal(t, "DROP TABLE a;", ms[0].Down)
	require.Equal(t, 2, ms[1].Version)
	require.Equal(t, "two", ms[1].Name)
	require.NotEqual(t, ms[0].Checksum, ms[1].Checksum)
}

func TestParseRejects(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		files fstest.MapFS
		want  string
	}{
		{"missing down", fstest.MapFS{
			"sql/000001_one.up.sql": file("x"),
		}, "no down file"},
		{"missing up", fstest.MapFS{
			"sql/000001_one.down.sql": file("x"),
		}, "no up file"},
		{"two names for one version", fstest.MapFS{
			"sql/000001_one.up.sql":   file("x"),
			"sql/000001_one.down.sql": file("x"),
			"sql/000001_uno.up.sql":   file("x"),
			"sql/000001_uno.down.sql": file("x"),
		}, "two names"},
		{"duplicate version, other padding", fstest.MapFS{
			"sql/000001_one.up.sql":   file("x"),
			"sql/000001_one.down.sql": file("x"),
			"sql/1_one.up.sql":        file("x"),
		}, "duplicate up file"},
		{"gap", fstest.MapFS{
			"sql/000001_one.up.sql":     file("x"),
			"sql/000001_one.down.sql":   file("x"),
			"sql/000003_three.up.sql":   file("x"),
			"sql/000003_three.down.sql": file("x"),
		}, "version 2 is missing"},
		{"does not start at 1", fstest.MapFS{
			"sql/000002_two.up.sql":   file("x"),
			"sql/000002_two.down.sql": file("x"),
		}, "version 1 is missing"},
		{"version 0", fstest.MapFS{
			"sql/000000_zero.up.sql":   file("x"),
			"sql/000000_zero.down.sql": file("x"),
		}, "positive integer"},
		{"bad name", fstest.MapFS{
			"sql/000001_One.up.sql": file("x"),
		}, "does not match"},
		{"no direction", fstest.MapFS{
			"sql/000001_one.sql": file("x"),
		}, "does not match"},
		{"empty file", fstest.MapFS{
			"sql/000001_one.up.sql":   file(" \n"),
			"sql/000001_one.down.sql": file("x"),
		}, "is empty"},
		{"directory", fstest.MapFS{
			"sql/sub/000001_one.up.sql": file("x"),
		}, "unexpected directory"},
		{"no files", fstest.MapFS{
			"sql": &fstest.MapFile{Mode: fs.ModeDir | 0o755},
		}, "no migration files"},
		{"no dir", fstest.MapFS{}, "read sql"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ms, err := parse(tc.files, "sql")
			require.ErrorContains(t, err, tc.want)
			require.Nil(t, ms)
		})
	}
}

func TestValidateSchema(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{"seqlease", "_x", "a1", "t_0123456789abcdef", "public", strings.Repeat("a", 63)} {
		require.NoError(t, ValidateSchema(ok), ok)
	}
	for _, bad := range []string{
		"", "Upper", "a b", "1abc", "a-b", `x"; drop table y; --`, `"quoted"`, "a;b",
		"with\x00nul", "pg_catalog", "pg_x", "information_schema", "é", strings.Repeat("a", 64),
	} {
		err := ValidateSchema(bad)
		require.ErrorIs(t, err, ErrInvalidSchema, "%q", bad)
	}
}

func TestNewDefaults(t *testing.T) {
	t.Parallel()
	m, err := New(nil)
	require.NoError(t, err)
	require.Equal(t, DefaultSchema, m.Schema())
	require.Equal(t, `"seqlease"`, m.schemaSQL)
	require.Equal(t, `"seqlease"."seqlease_migrations"`, m.trackedSQL)
	require.NotNil(t, m.logger)

	m, err = New(&Config{})
	require.NoError(t, err)
	require.Equal(t, DefaultSchema, m.Schema())

	_, err = New(&Config{Schema: "Bad"})
	require.ErrorIs(t, err, ErrInvalidSchema)
	require.ErrorContains(t, err, "Config.Schema")
}

func TestTypedErrors(t *testing.T) {
	t.Parallel()
	var err error = &ChecksumError{Version: 2, Name: "two", Applied: "aa", Embedded: "bb"}
	require.ErrorIs(t, err, ErrChecksumMismatch)
	require.NotErrorIs(t, err, ErrUnknownVersion)
	require.Equal(t, "migrations: checksum mismatch for migration 000002_two: applied aa, embedded bb", err.Error())
	var ce *ChecksumError
	require.ErrorAs(t, errors.Join(errors.New("other"), err), &ce)
	require.Equal(t, 2, ce.Version)

	err = &UnknownVersionError{Version: 7, Name: "seven"}
	require.ErrorIs(t, err, ErrUnknownVersion)
	require.NotErrorIs(t, err, ErrChecksumMismatch)
	require.Contains(t, err.Error(), "000007_seven")
}
