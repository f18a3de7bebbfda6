package doccheck

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// root is the repository's root, two levels above this package.
func root(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "go.mod")); err != nil {
		t.Fatalf("repository root not found at %s: %v", dir, err)
	}
	return dir
}

// repoFiles returns the repository's files (relative, slash-separated)
// whose names end with one of suffixes, outside .git, bin and testdata.
func repoFiles(t *testing.T, dir string, suffixes ...string) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case ".git", "bin", "testdata", "node_modules":
				return filepath.SkipDir
			}
			return nil
		}
		for _, s := range suffixes {
			if strings.HasSuffix(path, s) {
				rel, _ := filepath.Rel(dir, path)
				files = append(files, filepath.ToSlash(rel))
				break
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// TestMarkdownLinksResolve checks every relative link of every Markdown
// file of the repository: the file must exist, and a fragment on a
// Markdown file must name one of its headings.
func TestMarkdownLinksResolve(t *testing.T) {
	dir := root(t)
	files := repoFiles(t, dir, ".md")
	if len(files) < 10 {
		t.Fatalf("found only %d Markdown files under %s", len(files), dir)
	}
	anchors := map[string]map[string]bool{}
	anchorsOf := func(path string) map[string]bool {
		if a, ok := anchors[path]; ok {
			return a
		}
		text, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		anchors[path] = Anchors(string(text))
		return anchors[path]
	}
	checked := 0
	for _, f := range files {
		path := filepath.Join(dir, filepath.FromSlash(f))
		text, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range MarkdownLinks(string(text)) {
			if strings.Contains(l.Target, "://") || strings.HasPrefix(l.Target, "mailto:") {
				continue
			}
			checked++
			target, frag, _ := strings.Cut(l.Target, "#")
			dest := path
			if target != "" {
				dest = filepath.Join(filepath.Dir(path), filepath.FromSlash(target))
				if _, err := os.Stat(dest); err != nil {
					t.Errorf("%s:%d: link to %s: no such file", f, l.Line, l.Target)
					continue
				}
			}
			if frag != "" && strings.HasSuffix(dest, ".md") && !anchorsOf(dest)[frag] {
				t.Errorf("%s:%d: link to %s: no heading with anchor #%s", f, l.Line, l.Target, frag)
			}
		}
	}
	if checked < 50 {
		t.Errorf("checked only %d relative links: is the link pattern broken?", checked)
	}
}

var docsPath = regexp.MustCompile(`\bdocs/[A-Za-z0-9_./-]*[A-Za-z0-9_-]\.(?:md|json)\b`)

// TestDocsPathsInCodeExist checks the docs/ paths that Go comments, help
// texts and the Makefile cite: each must be a file of the repository.
func TestDocsPathsInCodeExist(t *testing.T) {
	dir := root(t)
	files := append(repoFiles(t, dir, ".go"), "Makefile")
	cited := 0
	for _, f := range files {
		text, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(f)))
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(text), "\n") {
			for _, p := range docsPath.FindAllString(line, -1) {
				cited++
				if _, err := os.Stat(filepath.Join(dir, filepath.FromSlash(p))); err != nil {
					t.Errorf("%s:%d: cites %s: no such file", f, i+1, p)
				}
			}
		}
	}
	if cited == 0 {
		t.Error("no docs/ path cited anywhere: is the pattern broken?")
	}
}

func TestMarkdownLinksSkipsCode(t *testing.T) {
	text := "see [a](a.md) and `[b](b.md)`\n```\n[c](c.md)\n```\n![d](d.png \"title\")\n"
	got := MarkdownLinks(text)
	if len(got) != 2 || got[0] != (Link{1, "a.md"}) || got[1] != (Link{5, "d.png"}) {
		t.Fatalf("MarkdownLinks = %v, want a.md on line 1 and d.png on line 5", got)
	}
}

func TestAnchorsSpellAsGitHub(t *testing.T) {
	text := "# Named leases\n## Fencing, and how to use `CheckFence`\n```\n# not a heading\n```\n## Tables\n## Tables\n"
	got := Anchors(text)
	for _, want := range []string{"named-leases", "fencing-and-how-to-use-checkfence", "tables", "tables-1"} {
		if !got[want] {
			t.Errorf("Anchors lacks %q: %v", want, got)
		}
	}
	if got["not-a-heading"] || len(got) != 4 {
		t.Errorf("Anchors = %v, want exactly 4 anchors", got)
	}
}
