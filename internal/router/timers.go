package router

import (
	"time"
)

// Timeouts: deadlines on intrusive lists, one list per kind of timeout.

// tick is how often each loop sweeps its deadlines.
const tick = 5 * time.Millisecond

// timer is a deadline on one of a loop's lists.
type timer struct {
	prev, next *timer
	list       *tlist
	at         int64 // loop clock, ns
	owner      any   // *client or *upconn
}

// tlist is a list of timers of one duration, ordered by deadline.
type tlist struct {
	head timer // sentinel
	d    int64 // the duration of every timer on the list, ns
}

func (l *tlist) init(d time.Duration) {
	l.head.prev, l.head.next = &l.head, &l.head
	l.d = int64(d)
}

// arm puts t at the end of l with deadline now+l.d, off any list it was on.
func (l *tlist) arm(t *timer, now int64) {
	t.stop()
	t.at = now + l.d
	t.list = l
	t.prev, t.next = l.head.prev, &l.head
	l.head.prev.next = t
	l.head.prev = t
}

// stop takes t off its list.
func (t *timer) stop() {
	if t.list == nil {
		return
	}
	t.prev.next, t.next.prev = t.next, t.prev
	t.prev, t.next, t.list = nil, nil, nil
}

// expired pops the first timer of l if its deadline has passed.
func (l *tlist) expired(now int64) *timer {
	t := l.head.next
	if t == &l.head || t.at > now {
		return nil
	}
	t.stop()
	return t
}
