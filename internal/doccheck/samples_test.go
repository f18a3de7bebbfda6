package doccheck

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// packageNames maps the package names samples use as qualifiers to their
// import paths, beyond the library's own packages (listed by go list).
var packageNames = map[string]string{
	"context":   "context",
	"errors":    "errors",
	"fmt":       "fmt",
	"json":      "encoding/json",
	"log":       "log",
	"slog":      "log/slog",
	"os":        "os",
	"sync":      "sync",
	"testing":   "testing",
	"time":      "time",
	"pgx":       "github.com/jackc/pgx/v5",
	"pgxpool":   "github.com/jackc/pgx/v5/pgxpool",
	"pgconn":    "github.com/jackc/pgx/v5/pgconn",
	"jetstream": "github.com/nats-io/nats.go/jetstream",
	"otel":      "go.opentelemetry.io/otel",
	"sdkmetric": "go.opentelemetry.io/otel/sdk/metric",
	"require":   "github.com/stretchr/testify/require",
}

// goList runs go list in dir and decodes its JSON stream.
func goList(t *testing.T, dir string, args ...string) []map[string]any {
	t.Helper()
	cmd := exec.Command("go", append([]string{"list"}, args...)...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list %v in %s: %v\n%s", args, dir, err, stderr.String())
	}
	var pkgs []map[string]any
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p map[string]any
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			return pkgs
		} else if err != nil {
			t.Fatal(err)
		}
		pkgs = append(pkgs, p)
	}
}

// ignored are the type errors a sample may have by the conventions of the
// package doc: your own undeclared identifiers, unused variables and
// imports shadowed by a variable.
var ignored = regexp.MustCompile(`^undefined: [A-Za-z_][A-Za-z0-9_]*$|declared and not used|imported and not used`)

type sampleFile struct {
	where  string // doc file and line of the sample's first line
	src    string
	offset int
}

// TestGoSamplesCompile type-checks every ```go block of README.md and
// docs/ against the library (see the package doc for the conventions).
func TestGoSamplesCompile(t *testing.T) {
	dir := root(t)
	packages := map[string]string{}
	for name, path := range packageNames {
		packages[name] = path
	}
	for _, p := range goList(t, dir, "-json=Name,ImportPath", "./...") {
		path := p["ImportPath"].(string)
		if !strings.Contains(path, "/internal/") && !strings.Contains(path, "/cmd/") {
			packages[p["Name"].(string)] = path
		}
	}

	docs := []string{"README.md"}
	for _, f := range repoFiles(t, filepath.Join(dir, "docs"), ".md") {
		docs = append(docs, "docs/"+f)
	}
	var files []sampleFile
	need := map[string]bool{}
	fragments := 0
	for _, d := range docs {
		text, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(d)))
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range Samples(string(text)) {
			where := fmt.Sprintf("%s:%d", d, s.Line)
			if s.Fragment {
				fragments++
				continue
			}
			src, offset, err := Source(s, packages)
			if err != nil {
				t.Errorf("%s: does not parse: %v", where, err)
				continue
			}
			paths, err := Imports(src)
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range paths {
				need[p] = true
			}
			files = append(files, sampleFile{where, src, offset})
		}
	}
	if len(files) < 30 {
		t.Fatalf("found only %d Go samples (and %d fragments)", len(files), fragments)
	}

	// Export data of every package the samples import, built in the
	// examples module: it sees the library through its replace directive.
	paths := make([]string, 0, len(need))
	for p := range need {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	exports := map[string]string{}
	listed := goList(t, filepath.Join(dir, "examples"), append([]string{"-export", "-deps", "-json=ImportPath,Export"}, paths...)...)
	for _, p := range listed {
		if e, ok := p["Export"].(string); ok {
			exports[p["ImportPath"].(string)] = e
		}
	}
	fset := token.NewFileSet()
	imp := importer.ForCompiler(fset, "gc", func(path string) (io.ReadCloser, error) {
		e, ok := exports[path]
		if !ok {
			return nil, fmt.Errorf("no export data for %q", path)
		}
		return os.Open(e)
	})

	for _, f := range files {
		file, err := parser.ParseFile(fset, f.where, f.src, parser.SkipObjectResolution)
		if err != nil {
			t.Errorf("%s: %v", f.where, err)
			continue
		}
		conf := types.Config{
			Importer: imp,
			Error: func(err error) {
				te := err.(types.Error)
				if ignored.MatchString(te.Msg) {
					return
				}
				pos := fset.Position(te.Pos)
				t.Errorf("%s (sample line %d): %s", f.where, pos.Line-f.offset, te.Msg)
			},
		}
		_, _ = conf.Check("sample", fset, []*ast.File{file}, nil)
	}
	t.Logf("%d samples checked, %d fragments skipped", len(files), fragments)
}

func TestSourceWrapsStatementsAndImports(t *testing.T) {
	packages := map[string]string{"lease": "example.com/lease", "time": "time", "context": "context"}
	src, offset, err := Source(Sample{Code: "l, _ := m.Hold(ctx, \"x\", &lease.AcquireOpts{TTL: time.Second})\nif err != nil { ... }\n...\nf(a, ...)\n"}, packages)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"example.com/lease"`, `"time"`, `"context"`, "func _(ctx context.Context", `{ panic("elided") }`, "f(a)"} {
		if !strings.Contains(src, want) {
			t.Errorf("Source lacks %s:\n%s", want, src)
		}
	}
	if line := strings.Split(src, "\n")[offset]; !strings.HasPrefix(line, "l, _ := m.Hold") {
		t.Errorf("offset %d points at %q, not the sample's first line", offset, line)
	}

	src, offset, err = Source(Sample{Code: "func f() time.Duration { return time.Second }\n"}, packages)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(src, "func _(") || strings.Split(src, "\n")[offset] != "func f() time.Duration { return time.Second }" {
		t.Errorf("declarations were wrapped, or offset %d is wrong:\n%s", offset, src)
	}
}

func TestSamplesFindsGoBlocks(t *testing.T) {
	text := "x\n```go\na := 1\n```\n```sh\nls\n```\n```go fragment\nfunc F()\n```\n"
	got := Samples(text)
	if len(got) != 2 || got[0] != (Sample{Line: 3, Code: "a := 1\n"}) || !got[1].Fragment || got[1].Line != 9 {
		t.Fatalf("Samples = %+v", got)
	}
}
