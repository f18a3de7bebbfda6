package main

import (
	"encoding/json"
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/seqlease/seqlease/internal/pgtest"
	"github.com/seqlease/seqlease/store"
	"github.com/seqlease/seqlease/store/postgres"
)

func TestConfig(t *testing.T) {
	t.Parallel()
	pool := pgtest.Shared(t, false)
	schema := pgtest.NewSchema(t, pool)
	s, err := postgres.New(pool, &postgres.Config{Schema: schema})
	require.NoError(t, err)

	for _, list := range [][]string{{"config", "get"}, {"config"}, {"config", "list"}} {
		code, out, errOut := seqlease(t, append([]string{"-schema", schema, "-json"}, list...)...)
		require.Equal(t, 0, code, "%v: %s", list, errOut)
		var rows []settingRow
		require.NoError(t, json.Unmarshal([]byte(out), &rows))
		require.Len(t, rows, len(store.SettingKeys()), "%v: every known key, set or not", list)
		for i, r := range rows {
			require.Equal(t, store.SettingKeys()[i], r.Key)
			require.False(t, r.Set, r.Key)
		}
	}

	code, out, errOut := seqlease(t, "-schema", schema, "-json", "config", "set", "lease.default_ttl", "90s", "-by", "alice")
	require.Equal(t, 0, code, errOut)
	var one settingRow
	require.NoError(t, json.Unmarshal([]byte(out), &one))
	require.Equal(t, "lease.default_ttl", one.Key)
	require.Equal(t, "1m30s", one.Value, "kept in canonical form")
	require.Equal(t, "alice", one.UpdatedBy)
	require.Contains(t, out, `"updated_at"`, "snake_case JSON")
	code, _, errOut = seqlease(t, "-schema", schema, "config", "set", "lease.history_retention", "--", "-1s")
	require.Equal(t, 0, code, errOut)

	code, out, errOut = seqlease(t, "-schema", schema, "config", "get", "lease.default_ttl")
	require.Equal(t, 0, code, errOut)
	require.Regexp(t, `lease\.default_ttl\s+duration\s+1m30s\s+\S+\s+alice`, out)

	before, err := s.ListSettings(t.Context())
	require.NoError(t, err)
	require.Len(t, before, 2)
	for _, c := range []struct {
		args []string
		msg  string
	}{
		{[]string{"config", "set", "lease.ttl", "30s"}, `unknown setting: "lease.ttl"`},
		{[]string{"config", "set", "lease.renew_share", "1.5"}, "Config.RenewShare 1.5 must be in (0, 1)"},
		{[]string{"config", "set", "lease.max_renewals", "--", "-2"}, "Config.MaxRenewals -2 must not be negative"},
		{[]string{"config", "set", "lease.default_ttl", "30"}, "is not a duration"},
		{[]string{"config", "set", "lease.history", "on"}, `"true" or "false"`},
		{[]string{"config", "set", "lease.blocking", "sometimes"}, `lease.blocking = "sometimes" is not "true" or "false"`},
		{[]string{"config", "set", "cleanup.interval", "48h"}, "cleanup: Config.Interval 48h0m0s must be in 0..24h0m0s"},
		{[]string{"config", "set", "lease.history", "true", "-by", "a\x07b"}, "-by"},
		{[]string{"config", "set", "lease.history"}, "wrong number of arguments"},
		{[]string{"config", "get", "nope"}, "unknown setting"},
		{[]string{"config", "unset", "lease.history", "-by", "x"}, "-by is for set"},
		{[]string{"config", "frob"}, `unknown action "frob"`},
		{[]string{"config", "list", "lease.history"}, "wrong number of arguments"},
	} {
		code, _, errOut := seqlease(t, append([]string{"-schema", schema}, c.args...)...)
		require.Equal(t, 2, code, "%v: %s", c.args, errOut)
		require.Contains(t, errOut, c.msg, "%v", c.args)
	}
	after, err := s.ListSettings(t.Context())
	require.NoError(t, err)
	require.Equal(t, before, after, "refused commands changed nothing")

	code, out, errOut = seqlease(t, "-schema", schema, "-json", "config", "unset", "lease.default_ttl")
	require.Equal(t, 0, code, errOut)
	require.NoError(t, json.Unmarshal([]byte(out), &one))
	require.False(t, one.Set)
	after, err = s.ListSettings(t.Context())
	require.NoError(t, err)
	require.Equal(t, before[1:], after)

	code, out, _ = seqlease(t, "config", "-h")
	require.Equal(t, 0, code)
	require.Contains(t, out, "Go Config")
	for _, k := range store.SettingKeys() {
		typ, err := store.SettingTypeOf(k)
		require.NoError(t, err)
		require.Regexp(t, `\n  `+regexp.QuoteMeta(k)+` +`+string(typ)+` +\S`, out, "the help lists %s, its type and what it is", k)
	}
	var documented []string
	for k := range settingDocs {
		documented = append(documented, k)
	}
	require.ElementsMatch(t, store.SettingKeys(), documented, "settingDocs says what every known key is, and no other")

	code, out, errOut = seqlease(t, "-schema", schema, "config", "set", "cleanup.interval", "10s")
	require.Equal(t, 0, code, errOut)
	require.Regexp(t, `cleanup\.interval\s+duration\s+10s`, out)

	code, out, errOut = seqlease(t, "-schema", schema, "config", "set", "lease.blocking", "FALSE")
	require.Equal(t, 0, code, errOut)
	require.Regexp(t, `lease\.blocking\s+bool\s+false`, out, "kept in canonical form")
}
