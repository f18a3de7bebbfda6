package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/seqlease/seqlease/ui"
)

const helpServe = `
Serves the read-only web interface (package ui) on -addr until
interrupted: every stream with its watermark, lag, expired leases, oldest
unresolved number and throughput; one stream's numbers around its
watermark; gaps with their reasons; named leases with their history;
readers with their lag. Pages refresh themselves every -refresh where
JavaScript runs and work without it. It only reads, and has no
authentication: the default address answers this machine only; bind
another (e.g. -addr :8080) only behind something that authenticates.
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
	if err := c.connect(ctx); err != nil {
		return err
	}
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", *addr)
	if err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	h, err := ui.New(&ui.Config{Store: c.store, Refresh: *refresh, AllowedHosts: serveHosts(*addr, ln.Addr(), hosts)})
	if err != nil {
		ln.Close()
		return usagef("serve: -allow-host: %v", err)
	}
	if ip := ln.Addr().(*net.TCPAddr).IP; !ip.IsLoopback() {
		fmt.Fprintf(c.errOut, "seqlease: serve: %s answers other machines, without authentication "+
			"(and only for the names localhost, 127.0.0.1, ::1 and -allow-host ones)\n", ln.Addr())
	}
	url := serveURL(ln.Addr().(*net.TCPAddr))
	if c.json {
		err = json.NewEncoder(c.out).Encode(serveRow{url}) // one line, as watch prints
	} else {
		_, err = fmt.Fprintf(c.out, "serving the seqlease web interface on %s (read-only; interrupt to stop)\n", url)
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
