package main

import (
	"crypto/sha256"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
)

// event is one event of the source: something that happened to an order.
type event struct {
	Index   int    // position in the source, 0-based
	ID      string // the operation id the pipeline records
	Type    string // placed, paid, shipped, cancelled
	Account int
	Order   string
	Amount  int64 // cents, on paid
}

// generate returns n events over the given number of accounts, from seed:
// orders are placed, then paid and shipped, or cancelled.
func generate(seed uint64, n, accounts int) []event {
	r := rand.New(rand.NewPCG(seed, seed^0x5eed))
	type open struct {
		account int
		order   string
		stage   string
		amount  int64
	}
	var opened []*open
	events := make([]event, 0, n)
	for len(events) < n {
		if len(opened) == 0 || r.IntN(3) == 0 {
			o := &open{account: r.IntN(accounts), order: fmt.Sprintf("o%d", len(events)), stage: "placed", amount: int64(100 + r.IntN(10_000))}
			opened = append(opened, o)
			events = append(events, event{Type: "placed", Account: o.account, Order: o.order})
			continue
		}
		i := r.IntN(len(opened))
		o := opened[i]
		switch {
		case o.stage == "placed" && r.IntN(5) == 0:
			o.stage = "cancelled"
		case o.stage == "placed":
			o.stage = "paid"
		default:
			o.stage = "shipped"
		}
		e := event{Type: o.stage, Account: o.account, Order: o.order}
		if o.stage == "paid" {
			e.Amount = o.amount
		}
		events = append(events, e)
		if o.stage == "cancelled" || o.stage == "shipped" {
			opened = slices.Delete(opened, i, i+1)
		}
	}
	for i := range events {
		events[i].Index = i
		events[i].ID = fmt.Sprintf("ev-%06d", i)
	}
	return events
}

// op is a projection operation: what a worker computes from an event, and
// what the projector applies. It travels as the committed payload.
type op struct {
	Event   int    `json:"event"`
	Account int    `json:"account"`
	Order   string `json:"order"`
	Status  string `json:"status"`
	Revenue int64  `json:"revenue"`
}

// project computes the operation of an event (the "work").
func project(e event) op {
	return op{Event: e.Index, Account: e.Account, Order: e.Order, Status: e.Type, Revenue: e.Amount}
}

// successors returns, for each event, the index of the next event of the
// same account (-1 after its last), and the first event of every account
// that has events. An account is an aggregate: its events happen one after
// another, and its read model depends on their order.
func successors(events []event) (next, first []int) {
	next = make([]int, len(events))
	last := map[int]int{} // account -> its latest event so far
	for i, e := range events {
		next[i] = -1
		if j, ok := last[e.Account]; ok {
			next[j] = i
		} else {
			first = append(first, i)
		}
		last[e.Account] = i
	}
	return next, first
}

// from is the state machine of an order: the status a transition to each
// status starts from ("" for an order not yet placed).
var from = map[string]string{"placed": "", "paid": "placed", "shipped": "paid", "cancelled": "placed"}

// account is the read model of one account, folded from its operations in
// the order they are applied.
type account struct {
	Version int               // operations applied
	Orders  map[string]string // order -> status
	Counts  map[string]int    // status -> transitions accepted
	Revenue int64             // running balance: the amounts paid so far
	Refused []string          // transitions out of order, refused and recorded
	Chain   [sha256.Size]byte // hash chain over the operations and the balance after each
}

// readModel is the projection's read model: per account, orders by status,
// revenue, and the history of what was applied. It is order-sensitive, as an
// event-sourced projection is: an order moves placed -> paid -> shipped or
// placed -> cancelled, and a transition from any other status is refused and
// recorded; every operation extends the account's hash chain. Two read
// models are equal only if each account saw the same operations in the same
// order; the order across accounts does not matter. The pipeline keeps that
// order by leasing an account's next event only after its previous one was
// committed (recovered work lands later in the sequence than the number it
// started under, so without that rule an account's events could swap).
type readModel map[int]*account

func (m readModel) apply(o op) {
	a := m[o.Account]
	if a == nil {
		a = &account{Orders: map[string]string{}, Counts: map[string]int{}}
		m[o.Account] = a
	}
	a.Version++
	prev, ok := from[o.Status]
	if cur := a.Orders[o.Order]; !ok || cur != prev {
		a.Refused = append(a.Refused, fmt.Sprintf("event %d: %s %s while %q", o.Event, o.Status, o.Order, cur))
	} else {
		a.Orders[o.Order] = o.Status
		a.Counts[o.Status]++
		a.Revenue += o.Revenue
	}
	h := sha256.New()
	h.Write(a.Chain[:])
	fmt.Fprintf(h, "%d|%s|%s|%d|%d", o.Event, o.Order, o.Status, o.Revenue, a.Revenue)
	copy(a.Chain[:], h.Sum(nil))
}

// equal reports whether two read models hold the same state.
func (m readModel) equal(o readModel) bool {
	if len(m) != len(o) {
		return false
	}
	for k, a := range m {
		b := o[k]
		if b == nil || a.Version != b.Version || a.Revenue != b.Revenue || a.Chain != b.Chain ||
			!maps.Equal(a.Orders, b.Orders) || !maps.Equal(a.Counts, b.Counts) || !slices.Equal(a.Refused, b.Refused) {
			return false
		}
	}
	return true
}

// refused counts the transitions the model refused as out of order.
func (m readModel) refused() int {
	n := 0
	for _, a := range m {
		n += len(a.Refused)
	}
	return n
}

// replay applies every event in source order: the reference.
func replay(events []event) readModel {
	m := readModel{}
	for _, e := range events {
		m.apply(project(e))
	}
	return m
}
