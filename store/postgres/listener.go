package postgres

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/jackc/pgx/v5"

	"github.com/seqlease/seqlease/store"
)

// listener is the LISTEN loop of one watch (see Listening in doc.go). Its
// owner gives it a channel, what to do with a payload, and what to do on
// a reset; run does the rest: connect, LISTEN, self-check, poll while
// deaf, reconnect with backoff, and count all that in the Store's
// ListenHealth.
type listener struct {
	name    string // which watch, in logs
	channel string
	connect func(context.Context) (*pgx.Conn, error)
	db      DB                   // sends the self-check notice
	deliver func(payload string) // a notice that is not a self-check
	reset   func()               // after every LISTEN: re-read what notices may have been missed
	poll    func()               // while deaf

	checkTimeout, pollEvery, recheckEvery time.Duration
	logger                                *slog.Logger
	health                                *listenHealth

	mu     sync.Mutex
	deaf   bool          // the last check heard nothing; cleared when one hears
	turned chan struct{} // capacity 1: deaf turned true
}

// errRecheck ends a deaf listener's connection: reconnect and check again.
var errRecheck = errors.New("deaf listener: reconnect and check again")

// run listens until ctx ends, and returns ctx's error once every
// goroutine it started has returned. It reconnects after a connection
// error with exponential backoff (up to a 30 s pause), or at once when it
// was deaf for recheckEvery.
func (l *listener) run(ctx context.Context) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	pctx, stopPolling := context.WithCancel(ctx)
	defer stopPolling()
	wg.Go(func() { l.pollWhileDeaf(pctx) })
	l.health.track(l)
	defer l.health.untrack(l)
	defer l.setDeaf(ctx, false) // a deaf listener that ends is deaf no more

	bo := backoff.NewExponentialBackOff()
	bo.InitialInterval = 50 * time.Millisecond
	bo.MaxInterval = 30 * time.Second
	bo.MaxElapsedTime = 0
	for {
		err := l.session(ctx, bo.Reset)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if errors.Is(err, errRecheck) {
			continue
		}
		pause := bo.NextBackOff()
		l.logger.WarnContext(ctx, "postgres: listener lost, reconnecting", slog.String("listener", l.name),
			slog.Any("error", err), slog.Duration("pause", pause))
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

// session holds one listening connection until it fails, ctx ends, or it
// was deaf for recheckEvery (errRecheck). It calls listening once the
// LISTEN succeeded.
func (l *listener) session(ctx context.Context, listening func()) error {
	conn, err := l.connect(ctx)
	if err != nil {
		return err
	}
	defer l.health.hearing(l, false)
	defer func() {
		closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		_ = conn.Close(closeCtx)
	}()
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{l.channel}.Sanitize()); err != nil {
		return err
	}
	listening()
	l.reset()
	heard, err := l.selfCheck(ctx, conn)
	if err != nil {
		return err
	}
	l.setDeaf(ctx, !heard)
	if heard {
		l.health.hearing(l, true)
	}
	recheck := ctx
	if !heard {
		var cancel context.CancelFunc
		recheck, cancel = context.WithTimeout(ctx, l.recheckEvery)
		defer cancel()
	}
	for {
		n, err := conn.WaitForNotification(recheck)
		switch {
		case err != nil && ctx.Err() == nil && recheck.Err() != nil:
			return errRecheck
		case err != nil:
			return err
		}
		if !isSelfCheck(n.Payload) {
			l.deliver(n.Payload)
		}
	}
}

// selfCheckPrefix starts a self-check notice's payload; a token follows.
const selfCheckPrefix = "c\t"

// isSelfCheck reports whether payload is a self-check notice (anyone's).
func isSelfCheck(payload string) bool { return strings.HasPrefix(payload, selfCheckPrefix) }

// selfCheck sends a self-check notice through the DB and waits up to
// checkTimeout to hear it on conn, delivering what else it hears
// meanwhile. An error is the connection's, or the notice's: one not sent
// proves nothing either way.
func (l *listener) selfCheck(ctx context.Context, conn *pgx.Conn) (heard bool, err error) {
	tok := store.NewToken()
	payload := selfCheckPrefix + hex.EncodeToString(tok[:])
	cctx, cancel := context.WithTimeout(ctx, l.checkTimeout)
	defer cancel()
	if _, err := l.db.Exec(cctx, `SELECT pg_notify($1, $2)`, l.channel, payload); err != nil {
		if ctx.Err() == nil && cctx.Err() != nil {
			return false, fmt.Errorf("LISTEN self-check: the notice was not sent within %v: %w", l.checkTimeout, err)
		}
		return false, interpretError("LISTEN self-check", err)
	}
	for {
		n, err := conn.WaitForNotification(cctx)
		switch {
		case err != nil && ctx.Err() == nil && cctx.Err() != nil:
			return false, nil
		case err != nil:
			return false, err
		case n.Payload == payload:
			return true, nil
		case !isSelfCheck(n.Payload):
			l.deliver(n.Payload)
		}
	}
}

// setDeaf records what the last check found, logs it and counts it.
func (l *listener) setDeaf(ctx context.Context, deaf bool) {
	l.mu.Lock()
	was := l.deaf
	l.deaf = deaf
	l.mu.Unlock()
	switch {
	case deaf:
		if !was {
			select {
			case l.turned <- struct{}{}:
			default:
			}
		}
		l.health.deafCheck(!was)
		l.logger.ErrorContext(ctx, ListenDeafMessage, slog.String("listener", l.name),
			slog.Duration("waited", l.checkTimeout), slog.Duration("poll_interval", l.pollEvery),
			slog.Duration("recheck_in", l.recheckEvery))
	case was:
		l.health.hearsAgain()
		if ctx.Err() == nil {
			l.logger.InfoContext(ctx, "postgres: LISTEN hears again; polling stopped", slog.String("listener", l.name))
		}
	}
}

// pollWhileDeaf polls every pollEvery while l is deaf, until ctx ends.
func (l *listener) pollWhileDeaf(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-l.turned:
		}
		t := time.NewTicker(l.pollEvery)
		for l.isDeaf() {
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
				l.poll()
			}
		}
		t.Stop()
	}
}

func (l *listener) isDeaf() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.deaf
}

// listenHealth is what a Store's listeners found (ListenHealth).
type listenHealth struct {
	mu     sync.Mutex
	checks store.ListenHealth // the counts and LastHeard; the rest is computed from since
	// since has a key per running listener: since when it has not heard
	// (it connects, checks, is deaf or reconnects), or zero while it hears.
	since map[*listener]time.Time
}

// track records that l runs, not hearing yet.
func (h *listenHealth) track(l *listener) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.since == nil {
		h.since = map[*listener]time.Time{}
	}
	h.since[l] = time.Now()
}

// untrack records that l no longer runs.
func (h *listenHealth) untrack(l *listener) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.since, l)
}

// hearing records that l's self-check just heard (true), or that l's
// connection ended (false): it hears no more from now, unless it had
// not heard already.
func (h *listenHealth) hearing(l *listener, heard bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	since, ok := h.since[l]
	switch {
	case !ok:
	case heard:
		h.since[l] = time.Time{}
		h.checks.LastHeard = time.Now()
	case since.IsZero():
		h.since[l] = time.Now()
	}
}

// deafCheck counts a check that heard nothing, and a listener that
// turned deaf with it.
func (h *listenHealth) deafCheck(turned bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.checks.DeafChecks++
	if turned {
		h.checks.Deaf++
	}
}

// hearsAgain counts a deaf listener no more.
func (h *listenHealth) hearsAgain() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.checks.Deaf--
}

// report returns the figures of ListenHealth.
func (h *listenHealth) report() store.ListenHealth {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := h.checks
	out.Watches = len(h.since)
	for _, since := range h.since {
		switch {
		case since.IsZero():
			out.Hearing++
		case out.NotHearingSince.IsZero() || since.Before(out.NotHearingSince):
			out.NotHearingSince = since
		}
	}
	return out
}
