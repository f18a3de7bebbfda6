package main

import (
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

// rank orders statuses: an order only moves forward. Shipped and cancelled
// never both happen to one order.
var rank = map[string]int{"placed": 1, "paid": 2, "shipped": 3, "cancelled": 3}

// account is the read model of one account.
type account struct {
	Orders  map[string]string // order -> status
	Counts  map[string]int    // status -> events seen
	Revenue int64
}

// readModel is the projection's read model: per account, orders by status
// and revenue. Applying an operation is order-insensitive (statuses only
// move forward, counts and revenue add up), because recovered work lands
// later in the sequence than the number it started under.
type readModel map[int]*account

func (m readModel) apply(o op) {
	a := m[o.Account]
	if a == nil {
		a = &account{Orders: map[string]string{}, Counts: map[string]int{}}
		m[o.Account] = a
	}
	if rank[o.Status] >= rank[a.Orders[o.Order]] {
		a.Orders[o.Order] = o.Status
	}
	a.Counts[o.Status]++
	a.Revenue += o.Revenue
}

// equal reports whether two read models hold the same state.
func (m readModel) equal(o readModel) bool {
	if len(m) != len(o) {
		return false
	}
	for k, a := range m {
		b := o[k]
		if b == nil || a.Revenue != b.Revenue || !maps.Equal(a.Orders, b.Orders) || !maps.Equal(a.Counts, b.Counts) {
			return false
		}
	}
	return true
}

// replay applies every event in source order: the reference.
func replay(events []event) readModel {
	m := readModel{}
	for _, e := range events {
		m.apply(project(e))
	}
	return m
}
