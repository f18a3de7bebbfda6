package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/seqlease/seqlease/ui"
)

const helpServe = `
Serves the web interface (package ui) on -addr until interrupted: every
stream with its watermark, lag, expired leases, oldest unresolved number
and throughput; one stream's numbers around its watermark; gaps with
their reasons; named leases with their history; readers with their lag;
parked work. Pages refresh themselves every -refresh where JavaScript
runs and work without it.

Without -operators it only reads, and has no authentication: the default
address answers this machine only; bind another (e.g. -addr :8080) only
behind something that authenticates. With -operators FILE every request
needs HTTP Basic authentication as one of the file's operators, and the
actions are on (force-release a named lease, resolve a stream's expired
entries, fill a gap, unpark or give up a parked entry), each confirmed
with a reason and recorded with the operator's name. FILE holds one
NAME:TOKEN per line (# comments), readable by its owner only; each token
at least 32 random characters (openssl rand -base64 32). A malformed or
weak file is refused, and nothing is served. HTTP carries the tokens in
clear text: beyond this machine, put a TLS proxy in front.

It answers requests for localhost, 127.0.0.1, [::1] and the host of
-addr only (others get 403), so that a web page cannot read it through a
name of its own pointed at this machine (DNS rebinding); -allow-host
adds a name it is reached by (repeatable).
It prints the URL to open (the loopback address when -addr binds every
interface); with -json as {"url": ...}.`

// serveRow is the serve command's JSON: where it listens.
type serveRow struct {
	URL string `json:"url"`
}

// serveHosts are the hosts serve answers for: the loopback names, the host
// of addr as given and as bound (unless unspecified, as in ":8080"), and
// the -allow-host ones.
func serveHosts(addr string, bound net.Addr, extra []string) []string {
	hosts := []string{"localhost", "127.0.0.1", "::1"}
	if h, _, err := net.SplitHostPort(addr); err == nil && h != "" {
		hosts = append(hosts, h)
	}
	if ta, ok := bound.(*net.TCPAddr); ok && !ta.IP.IsUnspecified() {
		hosts = append(hosts, ta.IP.String())
	}
	return append(hosts, extra...)
}

// serveURL is the URL serve prints for the address it listens on: on
// every interface (":8080", "0.0.0.0", "[::]") the IPv4 loopback, which
// such a listener answers and the interface allows, not the unspecified
// address, which names no host to connect to and which it refuses.
func serveURL(a *net.TCPAddr) string {
	host := a.IP
	if host.IsUnspecified() {
		host = net.IPv4(127, 0, 0, 1)
	}
	return "http://" + net.JoinHostPort(host.String(), strconv.Itoa(a.Port)) + "/"
}

// serve runs the web interface until ctx ends.
func (c *cli) serve(ctx context.Context, args []string) error {
	fs := c.flags("serve")
	addr := fs.String("addr", "127.0.0.1:8080", "listen address, host:port (port 0: any free port)")
	refresh := fs.Duration("refresh", ui.DefaultRefresh, "how often the pages refresh where JavaScript runs (0: never)")
	opsFile := fs.String("operators", "", "a file of operators (NAME:TOKEN lines, mode 600): HTTP Basic authentication for every request, and the actions on")
	var hosts []string
	fs.Func("allow-host", "a host name or IP address the interface also answers for (repeatable)", func(v string) error {
		hosts = append(hosts, v)
		return nil
	})
	if _, err := c.positional(fs, args, 0, 0); err != nil {
		return err
	}
	if *refresh < 0 {
		return usagef("serve: -refresh must not be negative")
	}
	if *refresh == 0 {
		*refresh = -1 // ui.Config: negative turns it off
	}
	var ops *operators
	if *opsFile != "" {
		var err error
		if ops, err = loadOperators(*opsFile); err != nil {
			return usagef("serve: -operators: %v", err)
		}
	}
	if err := c.connect(ctx); err != nil {
		return err
	}
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", *addr)
	if err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	// The log holds the store errors a page refers to (ref=...) and the
	// record of every action.
	cfg := &ui.Config{Store: c.store, Refresh: *refresh, AllowedHosts: serveHosts(*addr, ln.Addr(), hosts),
		Logger: slog.New(slog.NewTextHandler(c.errOut, nil))}
	mode := "read-only"
	if ops != nil {
		// The forms' tokens are keyed by a secret drawn by ui.New: they
		// do not outlive the process.
		cfg.Actions = &ui.ActionsConfig{Authenticate: ops.authenticate}
		mode = "actions on for the operators of " + *opsFile
	}
	uh, err := ui.New(cfg)
	if err != nil {
		ln.Close()
		return usagef("serve: -allow-host: %v", err)
	}
	var h http.Handler = uh
	if ops != nil {
		h = ops.require(uh)
	}
	if ip := ln.Addr().(*net.TCPAddr).IP; !ip.IsLoopback() {
		how := "without authentication"
		if ops != nil {
			how = "with the operators' tokens in clear text (HTTP: put a TLS proxy in front)"
		}
		fmt.Fprintf(c.errOut, "seqlease: serve: %s answers other machines, %s "+
			"(and only for the names localhost, 127.0.0.1, ::1 and -allow-host ones)\n", ln.Addr(), how)
	}
	url := serveURL(ln.Addr().(*net.TCPAddr))
	if c.json {
		err = json.NewEncoder(c.out).Encode(serveRow{url}) // one line, as watch prints
	} else {
		_, err = fmt.Fprintf(c.out, "serving the seqlease web interface on %s (%s; interrupt to stop)\n", url, mode)
	}
	if err != nil {
		ln.Close()
		return err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, WriteTimeout: time.Minute, IdleTimeout: time.Minute}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	select {
	case err := <-served:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	err = srv.Shutdown(sctx)
	if serr := <-served; !errors.Is(serr, http.ErrServerClosed) {
		err = errors.Join(err, serr)
	}
	if err != nil {
		return fmt.Errorf("serve: stop: %w", err)
	}
	return nil
}
