package ui

import (
	"net/http"
	"strconv"

	"github.com/seqlease/seqlease/store"
)

// Query parameters are validated before any store read: a bad one answers
// 400 with a message that quotes it through store.QuoteInput.

// limitParam is the limit parameter: 1..MaxPageSize, PageSize when absent.
func (h *Handler) limitParam(r *http.Request) (int, error) {
	s := r.URL.Query().Get("limit")
	if s == "" {
		return h.cfg.PageSize, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > h.cfg.MaxPageSize {
		return 0, badRequest("limit %s: want a whole number from 1 to %d", store.QuoteInput(s), h.cfg.MaxPageSize)
	}
	return n, nil
}

// numberParam is a non-negative integer parameter; def when absent.
func numberParam(r *http.Request, name string, def int64) (n int64, given bool, err error) {
	s := r.URL.Query().Get(name)
	if s == "" {
		return def, false, nil
	}
	n, err = strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return 0, false, badRequest("%s %s: want a whole number, 0 or more", name, store.QuoteInput(s))
	}
	return n, true, nil
}

// nameParam is a stream, reader or lease name parameter checked by valid;
// empty when absent unless required.
func nameParam(r *http.Request, name string, required bool, valid func(string) error) (string, error) {
	s := r.URL.Query().Get(name)
	if s == "" {
		if required {
			return "", badRequest("the %s parameter is required", name)
		}
		return "", nil
	}
	if err := valid(s); err != nil {
		return "", badRequest("%s %s: %v", name, store.QuoteInput(s), err)
	}
	return s, nil
}

// textParam is a free-text parameter (a gap reason).
func textParam(r *http.Request, name string) (string, error) {
	s := r.URL.Query().Get(name)
	if err := store.ValidateText(name, s); err != nil {
		return "", badRequest("%s %s: %v", name, store.QuoteInput(s), err)
	}
	return s, nil
}

// boolParam is a flag parameter: absent, "", "0" or "1".
func boolParam(r *http.Request, name string) (bool, error) {
	switch s := r.URL.Query().Get(name); s {
	case "", "0":
		return false, nil
	case "1":
		return true, nil
	default:
		return false, badRequest("%s %s: want 0 or 1", name, store.QuoteInput(s))
	}
}
