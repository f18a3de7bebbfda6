package main

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"strconv"

	"github.com/seqlease/seqlease/migrations"
)

// versionRow is the output of `version`.
type versionRow struct {
	Module    string `json:"module"`  // the module the binary was built from
	Version   string `json:"version"` // its version: a tag, or (devel) for a local build
	GoVersion string `json:"go_version"`
	// Revision is the VCS revision the binary was built from, or
	// unknownRevision when the build recorded none.
	Revision string `json:"vcs_revision"`
	Time     string `json:"vcs_time,omitempty"`
	Modified bool   `json:"vcs_modified,omitempty"`
	// SchemaLatest is the newest migration the binary embeds.
	SchemaLatest int `json:"schema_latest"`
	// Schema and SchemaVersion describe the database's schema: the newest
	// migration applied (0: not migrated); null when the database could not
	// be read, DatabaseError says why.
	Schema        string `json:"schema"`
	SchemaVersion *int   `json:"schema_version"`
	// SchemaPending counts the embedded migrations not applied.
	SchemaPending int    `json:"schema_pending"`
	DatabaseError string `json:"database_error,omitempty"`
}

func (c *cli) version(ctx context.Context, args []string) error {
	fs := c.flags("version")
	if _, err := c.positional(fs, args, 0, 0); err != nil {
		return err
	}
	row := versionRow{Schema: c.schema}
	bi, _ := debug.ReadBuildInfo()
	row.fromBuild(bi)
	for _, m := range migrations.Migrations() {
		row.SchemaLatest = max(row.SchemaLatest, m.Version)
	}
	err := c.schemaVersion(ctx, &row)
	var ue *usageError
	if errors.As(err, &ue) {
		return err
	}
	if err != nil {
		row.DatabaseError = err.Error()
	}
	schema := "not read: " + row.DatabaseError
	if row.SchemaVersion != nil {
		schema = fmt.Sprintf("%d (%d pending)", *row.SchemaVersion, row.SchemaPending)
		if *row.SchemaVersion == 0 {
			schema = fmt.Sprintf("0, not migrated (seqlease -schema %s migrate up)", c.schema)
		}
	}
	return c.emit(row, []string{"seqlease", row.Version}, [][]string{
		{"module", row.Module}, {"go", row.GoVersion}, {"revision", row.revisionText()},
		{"embedded schema", strconv.Itoa(row.SchemaLatest)}, {"schema " + c.schema, schema},
	})
}

// schemaVersion reads the newest applied migration of the schema, if the
// database answers.
func (c *cli) schemaVersion(ctx context.Context, row *versionRow) error {
	if err := c.connect(ctx); err != nil {
		return err
	}
	m, err := migrations.New(&migrations.Config{Schema: c.schema})
	if err != nil {
		return err
	}
	st, err := m.Status(ctx, c.pool)
	if err != nil {
		return err
	}
	v := 0
	for _, s := range st {
		if s.Applied {
			v = max(v, s.Version)
		} else {
			row.SchemaPending++
		}
	}
	row.SchemaVersion = &v
	return nil
}

// unknownRevision is the revision of a binary whose build recorded none.
const unknownRevision = "unknown"

// fromBuild fills the binary's part of row from bi, nil when the binary
// has no build information. The VCS settings are there when the go command
// built the binary in a checkout (go build, go install); go run, go test
// and -buildvcs=false record none.
func (row *versionRow) fromBuild(bi *debug.BuildInfo) {
	row.Module, row.Version, row.Revision = "github.com/seqlease/seqlease", "(unknown)", unknownRevision
	if bi == nil {
		return
	}
	row.GoVersion = bi.GoVersion
	if bi.Main.Path != "" {
		row.Module, row.Version = bi.Main.Path, bi.Main.Version
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			row.Revision = s.Value
		case "vcs.time":
			row.Time = s.Value
		case "vcs.modified":
			row.Modified = s.Value == "true"
		}
	}
}

// revisionText is the revision line of the table.
func (row *versionRow) revisionText() string {
	switch {
	case row.Revision == unknownRevision:
		return unknownRevision + " (the build recorded no VCS revision: go run, go test, -buildvcs=false, or no checkout)"
	case row.Modified:
		return row.Revision + " (modified)"
	}
	return row.Revision
}
