package doccheck

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"regexp"
	"sort"
	"strings"
	"unicode"
)

// Link is one link target found in a file, with the line it is on.
type Link struct {
	Line   int
	Target string
}

var (
	mdLink   = regexp.MustCompile(`!?\[[^\]]*\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)
	codeSpan = regexp.MustCompile("`[^`]*`")
	fence    = regexp.MustCompile("^\\s*(```|~~~)")
	heading  = regexp.MustCompile(`^(#{1,6})\s+(.*?)\s*#*\s*$`)
)

// MarkdownLinks returns the targets of the Markdown links and images of
// text, outside fenced code blocks and code spans.
func MarkdownLinks(text string) []Link {
	var links []Link
	inFence := false
	for i, line := range strings.Split(text, "\n") {
		if fence.MatchString(line) {
			inFence = !inFence
			continue
		}
		if inFence {
			continue
		}
		line = codeSpan.ReplaceAllString(line, "")
		for _, m := range mdLink.FindAllStringSubmatch(line, -1) {
			links = append(links, Link{Line: i + 1, Target: m[1]})
		}
	}
	return links
}

// Anchors returns the fragment of every heading of a Markdown text, as
// GitHub derives them: lower case, without punctuation, spaces as
// hyphens, and "-1", "-2", ... appended to repeats.
func Anchors(text string) map[string]bool {
	anchors := map[string]bool{}
	seen := map[string]int{}
	inFence := false
	for _, line := range strings.Split(text, "\n") {
		if fence.MatchString(line) {
			inFence = !inFence
			continue
		}
		m := heading.FindStringSubmatch(line)
		if inFence || m == nil {
			continue
		}
		slug := Slug(m[2])
		if n := seen[slug]; n > 0 {
			anchors[fmt.Sprintf("%s-%d", slug, n)] = true
		} else {
			anchors[slug] = true
		}
		seen[slug]++
	}
	return anchors
}

// Slug is the anchor GitHub gives a heading's text.
func Slug(title string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(title) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// Sample is one ```go block of a Markdown file.
type Sample struct {
	// Line is the line of the block's first line of code.
	Line int
	// Fragment reports a block marked ```go fragment: not checked.
	Fragment bool
	// Code is the block's text.
	Code string
}

var goFence = regexp.MustCompile("^```go(\\s+fragment)?\\s*$")

// Samples returns the ```go blocks of a Markdown text.
func Samples(text string) []Sample {
	var (
		samples []Sample
		cur     *Sample
		lines   []string
	)
	for i, line := range strings.Split(text, "\n") {
		switch {
		case cur == nil:
			if m := goFence.FindStringSubmatch(line); m != nil {
				cur = &Sample{Line: i + 2, Fragment: m[1] != ""}
				lines = nil
			}
		case strings.HasPrefix(line, "```"):
			cur.Code = strings.Join(lines, "\n") + "\n"
			samples = append(samples, *cur)
			cur = nil
		default:
			lines = append(lines, line)
		}
	}
	return samples
}

var (
	elidedBlock = regexp.MustCompile(`\{\s*\.\.\.\s*\}`)
	elidedLine  = regexp.MustCompile(`(?m)^\s*\.\.\.\s*(//.*)?$`)
	elidedArgs  = regexp.MustCompile(`,\s*\.\.\.\)`)
)

// Unelide replaces the elisions of a sample with Go code that compiles:
// "{ ... }" with a block that panics, a line "..." with an empty line, and
// ", ...)" with ")". It keeps the lines where they are.
func Unelide(code string) string {
	code = elidedBlock.ReplaceAllString(code, `{ panic("elided") }`)
	code = elidedLine.ReplaceAllString(code, "")
	return elidedArgs.ReplaceAllString(code, ")")
}

// placeholders are the parameters of the function a statement sample is
// wrapped in, and the packages their types need.
const placeholders = "ctx context.Context, pool *pgxpool.Pool, tx pgx.Tx, st *postgres.Store, " +
	"b *barrier.Barrier, leaser *sequence.Leaser, m *lease.Manager, t *testing.T"

var placeholderPackages = []string{"context", "pgxpool", "pgx", "postgres", "barrier", "sequence", "lease", "testing"}

// Source turns a sample into a Go file of package sample, and returns
// how many lines it put before the sample's first line. packages maps a
// package name to its import path: a name the sample uses as a qualifier
// is imported under that name unless the sample imports its path itself.
func Source(s Sample, packages map[string]string) (src string, offset int, err error) {
	code := Unelide(s.Code)
	fset := token.NewFileSet()
	file, perr := parser.ParseFile(fset, "sample.go", "package sample\n"+code, parser.SkipObjectResolution)
	wrapped := perr != nil
	body := code
	var names []string
	if wrapped {
		body = "func _(" + placeholders + ") error {\n{\n" + code + "}\nreturn nil\n}\n"
		file, perr = parser.ParseFile(fset, "sample.go", "package sample\n"+body, parser.SkipObjectResolution)
		if perr != nil {
			return "", 0, perr
		}
		names = append(names, placeholderPackages...)
	}
	imported := map[string]bool{}
	for _, spec := range file.Imports {
		imported[strings.Trim(spec.Path.Value, `"`)] = true
	}
	ast.Inspect(file, func(n ast.Node) bool {
		if sel, ok := n.(*ast.SelectorExpr); ok {
			if id, ok := sel.X.(*ast.Ident); ok {
				names = append(names, id.Name)
			}
		}
		return true
	})
	add := map[string]bool{}
	for _, name := range names {
		if path, ok := packages[name]; ok && !imported[path] {
			add[name] = true
		}
	}
	sorted := make([]string, 0, len(add))
	for name := range add {
		sorted = append(sorted, name)
	}
	sort.Strings(sorted)
	var head strings.Builder
	head.WriteString("package sample\n")
	if len(sorted) > 0 {
		head.WriteString("import (\n")
		for _, name := range sorted {
			fmt.Fprintf(&head, "\t%s %q\n", name, packages[name])
		}
		head.WriteString(")\n")
	}
	offset = strings.Count(head.String(), "\n")
	if wrapped {
		offset += 2
	}
	return head.String() + body, offset, nil
}

// Imports returns the import paths of a Go file.
func Imports(src string) ([]string, error) {
	file, err := parser.ParseFile(token.NewFileSet(), "sample.go", src, parser.ImportsOnly)
	if err != nil {
		return nil, err
	}
	var paths []string
	for _, spec := range file.Imports {
		paths = append(paths, strings.Trim(spec.Path.Value, `"`))
	}
	return paths, nil
}
