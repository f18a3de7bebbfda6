package model

import (
	"slices"
	"time"
)

// shrinker makes a failing schedule smaller by delta debugging: it removes
// chunks of rounds, then single steps, then runs the steps of each round
// one after the other, keeping every change under which the schedule
// still fails the same way (the same kind of failure), each try on a
// fresh store. Steps that name what a removed step made are skipped at run
// time, so any subset is a valid schedule.
type shrinker struct {
	fails    func(schedule) *failure // nil when the schedule passes
	kind     string
	runs     int
	maxRuns  int
	deadline time.Time
}

// try reports whether s fails the same way, and the failure.
func (sh *shrinker) try(s schedule) (*failure, bool) {
	if sh.spent() || len(s) == 0 {
		return nil, false
	}
	sh.runs++
	f := sh.fails(s)
	return f, f != nil && f.kind == sh.kind
}

func (sh *shrinker) spent() bool { return sh.runs >= sh.maxRuns || time.Now().After(sh.deadline) }

// shrink returns the smallest failing schedule it found, and its failure.
func (sh *shrinker) shrink(s schedule, f *failure) (schedule, *failure) {
	for progress := true; progress && !sh.spent(); {
		progress = false
		// Chunks of rounds, halving the chunk when no chunk can go.
		for size := len(s) / 2; size >= 1 && !sh.spent(); size /= 2 {
			for i := 0; i+size <= len(s) && !sh.spent(); {
				c := slices.Concat(s[:i], s[i+size:])
				if cf, ok := sh.try(c); ok {
					s, f, progress = c, cf, true
					continue // the next chunk moved to i
				}
				i += size
			}
		}
		// Single steps, from the last.
		for i := len(s) - 1; i >= 0 && !sh.spent(); i-- {
			for j := len(s[i]) - 1; j >= 0 && len(s[i]) > 1 && !sh.spent(); j-- {
				c := slices.Clone(s)
				c[i] = slices.Delete(slices.Clone(s[i]), j, j+1)
				if cf, ok := sh.try(c); ok {
					s, f, progress = c, cf, true
				}
			}
		}
	}
	// Rounds run one step at a time, where concurrency is not needed.
	for i := len(s) - 1; i >= 0 && !sh.spent(); i-- {
		if len(s[i]) < 2 {
			continue
		}
		var seq []round
		for _, st := range s[i] {
			seq = append(seq, round{st})
		}
		c := slices.Concat(s[:i], seq, s[i+1:])
		if cf, ok := sh.try(c); ok {
			s, f = c, cf
		}
	}
	return s, f
}
