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
