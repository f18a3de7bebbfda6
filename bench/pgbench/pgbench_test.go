package pgbench

import (
	"slices"
	"strings"
	"testing"
)

func TestStatements(t *testing.T) {
	stmts, vars, err := Statements(LeaseCommit)
	if err != nil {
		t.Fatal(err)
	}
	if len(stmts) != 2 {
		t.Fatalf("got %d statements, want 2: %q", len(stmts), stmts)
	}
	if strings.Contains(stmts[0], `\gset`) || strings.Contains(stmts[0], "--") {
		t.Errorf("statement 1 keeps pgbench syntax or comments: %s", stmts[0])
	}
	if !strings.Contains(stmts[1], "number = $1 AND token = $2::uuid") || !slices.Equal(vars[1], []string{"number", "token"}) {
		t.Errorf("statement 2: variables not turned into parameters: %s %v", stmts[1], vars[1])
	}
	stmts, vars, err = Statements(NamedLease)
	if err != nil {
		t.Fatal(err)
	}
	if len(stmts) != 2 || !slices.Equal(vars[0], []string{"client_id"}) || !slices.Equal(vars[1], []string{"client_id", "fence"}) {
		t.Errorf("named lease: %q %v", stmts, vars)
	}
	if !strings.Contains(stmts[0], "$1::text") {
		t.Errorf("the cast after a variable is kept: %s", stmts[0])
	}
}

// TestStatementsEveryScript checks that Statements models every script:
// each statement is plain SQL, and the variables are the ones pgbench
// defines (client_id) or the script sets with \gset (number, token, fence).
func TestStatementsEveryScript(t *testing.T) {
	known := []string{"client_id", "number", "token", "fence"}
	want := map[string]int{Lease: 1, LeaseCommit: 2, NamedLease: 2, OwnStream: 2, OwnStreamNotify: 2, Sequence: 2}
	names := Scripts()
	if len(names) != len(want) {
		t.Errorf("scripts %q, want the %d named by the constants", names, len(want))
	}
	for _, name := range names {
		stmts, vars, err := Statements(name)
		if err != nil {
			t.Fatal(err)
		}
		if len(stmts) != want[name] {
			t.Errorf("%s: got %d statements, want %d: %q", name, len(stmts), want[name], stmts)
		}
		for i, sql := range stmts {
			if strings.Contains(sql, `\gset`) || strings.Contains(sql, "--") || strings.HasSuffix(sql, ";") {
				t.Errorf("%s statement %d keeps pgbench syntax or comments: %s", name, i+1, sql)
			}
			for _, v := range vars[i] {
				if !slices.Contains(known, v) {
					t.Errorf("%s statement %d: unknown variable %q", name, i+1, v)
				}
			}
		}
	}
	stmts, vars, err := Statements(OwnStream)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(vars[0], []string{"client_id"}) || !slices.Equal(vars[1], []string{"client_id", "number", "token"}) {
		t.Errorf("own stream: %q %v", stmts, vars)
	}
	stmts, _, err = Statements(OwnStreamNotify)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Count(stmts[1], "pg_notify(") != 1 {
		t.Errorf("own stream + notify: the commit should notify once: %s", stmts[1])
	}
	stmts, _, err = Statements(Sequence)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(stmts[0], "nextval('"+SequenceName+"')") {
		t.Errorf("sequence: the lease does not take nextval('%s'): %s", SequenceName, stmts[0])
	}
}
