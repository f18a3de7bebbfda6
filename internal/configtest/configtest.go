// Package configtest holds the check that the constructors' fuzz targets
// share: a refused Config is refused with a clear, typed error that names
// the field to blame. It is imported by tests only.
package configtest

import (
	"errors"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/seqlease/seqlease/store"
)

// field finds the blamed field in an error: "Config.Field", or a nested
// "Config.Outer.Inner" (metrics' EvaluatorConfig.Thresholds.OpenGaps,
// cleanup's Config.Hooks.Timeout, through the *HooksConfig).
var field = regexp.MustCompile(`Config\.([A-Za-z]+(?:\.[A-Za-z]+)?)`)

// RequireBlame fails t unless err matches store.ErrInvalidArgument and names
// a field of *cfg (cfg is a pointer to the Config given to the constructor),
// and again, which calls the constructor with *cfg once more, no longer
// blames that field once it is reset to its zero value, its default.
func RequireBlame(t testing.TB, err error, cfg any, again func() error) {
	t.Helper()
	if !errors.Is(err, store.ErrInvalidArgument) {
		t.Fatalf("%+v: %v does not match store.ErrInvalidArgument", cfg, err)
	}
	m := field.FindStringSubmatch(err.Error())
	if m == nil {
		t.Fatalf("%+v: %v names no Config field", cfg, err)
	}
	v := reflect.ValueOf(cfg).Elem()
	for _, name := range strings.Split(m[1], ".") {
		if v.Kind() == reflect.Pointer { // a sub-config: Config.Hooks.Timeout
			v = v.Elem()
		}
		if v = v.FieldByName(name); !v.IsValid() {
			t.Fatalf("%v names Config.%s, which does not exist", err, m[1])
		}
	}
	v.Set(reflect.Zero(v.Type()))
	if err := again(); err != nil && field.FindString(err.Error()) == m[0] {
		t.Fatalf("Config.%s blamed again with its default value: %v", m[1], err)
	}
}
