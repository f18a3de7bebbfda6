package chaos

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
)

// Proxy is a TCP proxy between PostgreSQL clients and a server that reads
// the wire protocol's message framing in both directions, so that a test can
// cut one connection at an exact point of a conversation: drop a request
// before the server sees it, or let the server execute it and drop the
// reply. Between faults it forwards every byte unchanged. Connections must
// not use TLS (sslmode=disable).
type Proxy struct {
	ln     net.Listener
	target string

	mu     sync.Mutex
	rule   *Rule // armed, not yet fired
	conns  map[*proxyConn]struct{}
	closed bool
	wg     sync.WaitGroup
}

// Action is what a Rule does to the connection whose request matched.
type Action int

const (
	// DropRequest closes the connection instead of forwarding the request:
	// the server never executes it.
	DropRequest Action = iota + 1
	// DropReply forwards the request, swallows everything the server
	// sends after it up to and including the ReadyForQuery that ends the
	// request's exchange (so the server finished it: a commit is durable),
	// and then closes the connection: the client never learns the outcome.
	DropReply
)

// Rule is an armed fault: the first connection whose client messages
// satisfy Match in order (Match[0] by one message, Match[1] by a later one,
// ...) suffers Action at the message that satisfies the last of them. A
// message is the type byte followed by the body.
type Rule struct {
	Match  []func(msg []byte) bool
	Action Action
	fired  chan struct{}
}

// Contains returns a matcher of the messages that contain every one of
// parts.
func Contains(parts ...[]byte) func(msg []byte) bool {
	return func(msg []byte) bool {
		for _, p := range parts {
			if !bytes.Contains(msg, p) {
				return false
			}
		}
		return true
	}
}

// SimpleQuery returns a matcher of the simple-protocol Query message whose
// text is exactly sql (pgx sends "commit" of a transaction this way).
func SimpleQuery(sql string) func(msg []byte) bool {
	want := append(append([]byte{'Q'}, sql...), 0)
	return func(msg []byte) bool { return bytes.Equal(msg, want) }
}

// NewProxy listens on a free port of 127.0.0.1 and forwards every
// connection to target (host:port). Close stops it.
func NewProxy(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("chaos: proxy: %w", err)
	}
	p := &Proxy{ln: ln, target: target, conns: map[*proxyConn]struct{}{}}
	p.wg.Go(p.accept)
	return p, nil
}

// Addr returns the proxy's address, host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Arm arms r, replacing a rule that has not fired yet. The returned channel
// closes when r has fired: for DropRequest once the request is withheld
// (the connection closes next), for DropReply once the server finished the
// request and the connection is closed.
func (p *Proxy) Arm(r Rule) <-chan struct{} {
	r.fired = make(chan struct{})
	p.mu.Lock()
	p.rule = &r
	p.mu.Unlock()
	return r.fired
}

// Close stops accepting, closes every connection and waits for the
// proxy's goroutines.
func (p *Proxy) Close() error {
	err := p.ln.Close()
	p.mu.Lock()
	p.closed = true
	for c := range p.conns {
		c.close()
	}
	p.mu.Unlock()
	p.wg.Wait()
	return err
}

func (p *Proxy) accept() {
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return // closed
		}
		server, err := net.Dial("tcp", p.target)
		if err != nil {
			client.Close()
			continue
		}
		c := &proxyConn{p: p, client: client, server: server}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			c.close()
			return
		}
		p.conns[c] = struct{}{}
		p.wg.Go(c.clientToServer)
		p.mu.Unlock()
	}
}

// proxyConn is one proxied connection.
type proxyConn struct {
	p              *Proxy
	client, server net.Conn
	once           sync.Once

	mu       sync.Mutex
	step     int   // how many matchers of the armed rule this connection satisfied
	rule     *Rule // the rule this connection fired (DropReply), or nil
	swallow  bool  // drop the server's bytes until ReadyForQuery
	matching *Rule // the rule step counts for
}

func (c *proxyConn) close() {
	c.once.Do(func() {
		c.client.Close()
		c.server.Close()
	})
}

func (c *proxyConn) forget() {
	c.close()
	c.p.mu.Lock()
	delete(c.p.conns, c)
	c.p.mu.Unlock()
}

// clientToServer forwards the client's messages and applies the armed
// rule. The first message (startup, SSL or cancel request) has no type
// byte; the server's side is read from once it was forwarded.
func (c *proxyConn) clientToServer() {
	defer c.forget()
	r := newReader(c.client)
	for {
		first, err := r.untyped()
		if err != nil {
			return
		}
		code := uint32(0)
		if len(first) >= 8 {
			code = binary.BigEndian.Uint32(first[4:8])
		}
		if _, err := c.server.Write(first); err != nil {
			return
		}
		if code != 80877103 && code != 80877104 { // not SSLRequest, GSSENCRequest
			break
		}
		// Refused with one byte (TLS is not supported), then the startup
		// message comes.
		answer := make([]byte, 1)
		if _, err := io.ReadFull(c.server, answer); err != nil {
			return
		}
		if _, err := c.client.Write(answer); err != nil {
			return
		}
	}
	c.p.wg.Go(c.serverToClient) // from now on every server message is typed
	for {
		msg, err := r.typed()
		if err != nil {
			return
		}
		if c.apply(msg) == DropRequest {
			return // closes both sides; the request is never sent
		}
		if _, err := c.server.Write(msg); err != nil {
			return
		}
	}
}

// apply advances the armed rule with msg and returns the action to take on
// it now (0: forward it).
func (c *proxyConn) apply(msg []byte) Action {
	p := c.p
	p.mu.Lock()
	defer p.mu.Unlock()
	r := p.rule
	if r == nil {
		return 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.matching != r {
		c.matching, c.step = r, 0
	}
	// msg has its 4-byte length after the type byte; matchers see type and body.
	view := append([]byte{msg[0]}, msg[5:]...)
	if !r.Match[c.step](view) {
		return 0
	}
	if c.step++; c.step < len(r.Match) {
		return 0
	}
	p.rule = nil // fired: one connection only
	if r.Action == DropRequest {
		close(r.fired)
		return DropRequest
	}
	c.rule, c.swallow = r, true
	return 0
}

// serverToClient forwards the server's messages, or swallows them after a
// DropReply fired until the ReadyForQuery that ends the exchange.
func (c *proxyConn) serverToClient() {
	defer c.forget()
	r := newReader(c.server)
	for {
		msg, err := r.typed()
		if err != nil {
			return
		}
		c.mu.Lock()
		swallow, rule := c.swallow, c.rule
		c.mu.Unlock()
		if swallow {
			if msg[0] == 'Z' {
				c.close()
				close(rule.fired)
				return
			}
			continue
		}
		if _, err := c.client.Write(msg); err != nil {
			return
		}
	}
}

// reader reads whole protocol messages.
type reader struct{ r io.Reader }

func newReader(r io.Reader) *reader { return &reader{r} }

func (r *reader) n(n int) ([]byte, error) {
	b := make([]byte, n)
	_, err := io.ReadFull(r.r, b)
	return b, err
}

// untyped reads a message without a type byte: length (4 bytes, counting
// itself) and body.
func (r *reader) untyped() ([]byte, error) {
	head, err := r.n(4)
	if err != nil {
		return nil, err
	}
	return r.rest(head, int(binary.BigEndian.Uint32(head)))
}

// typed reads a message with a type byte: type, length, body.
func (r *reader) typed() ([]byte, error) {
	head, err := r.n(5)
	if err != nil {
		return nil, err
	}
	return r.rest(head, int(binary.BigEndian.Uint32(head[1:]))+1)
}

func (r *reader) rest(head []byte, total int) ([]byte, error) {
	if total < len(head) || total > 1<<30 {
		return nil, errors.New("chaos: proxy: bad message length")
	}
	msg := make([]byte, total)
	copy(msg, head)
	_, err := io.ReadFull(r.r, msg[len(head):])
	return msg, err
}
