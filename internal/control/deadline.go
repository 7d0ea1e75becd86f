package control

import (
	"context"
	"sync"
	"time"
)

// Deadline is a change's time limit (cellctl's --timeout, the Terraform
// provider's DefaultTimeout, the operator's drain step): a context that
// ends with context.DeadlineExceeded once its time has run, its clock
// stopped while held. A change holds the Deadline of its context while
// its data moves' steps run at the cells (Hold): each call to a cell is
// bounded on its own, and a copy takes as long as the data does, which a
// command's 30 seconds (or a reconcile's step) were never meant to bound.
type Deadline struct {
	context.Context // the parent: values, and its own end
	done            chan struct{}

	mu    sync.Mutex
	err   error
	left  time.Duration
	since time.Time // when the clock last started (held == 0)
	held  int
	timer *time.Timer
}

// WithDeadline is parent ending after d of unheld time; stop frees it.
func WithDeadline(parent context.Context, d time.Duration) (ctx *Deadline, stop func()) {
	dl := &Deadline{Context: parent, done: make(chan struct{}), left: d, since: time.Now()}
	dl.mu.Lock() // end, from the timer, reads dl.timer
	dl.timer = time.AfterFunc(d, func() { dl.end(context.DeadlineExceeded) })
	dl.mu.Unlock()
	go func() {
		select {
		case <-parent.Done():
			dl.end(parent.Err())
		case <-dl.done:
		}
	}()
	return dl, func() { dl.end(context.Canceled) }
}

func (d *Deadline) Done() <-chan struct{} { return d.done }

// deadlineKey finds a Deadline in the contexts made from it.
type deadlineKey struct{}

func (d *Deadline) Value(key any) any {
	if key == (deadlineKey{}) {
		return d
	}
	return d.Context.Value(key)
}

// Hold holds the Deadline ctx was made from, if any (see Deadline.Hold);
// with none it does nothing.
func Hold(ctx context.Context) (resume func()) {
	if d, ok := ctx.Value(deadlineKey{}).(*Deadline); ok {
		return d.Hold()
	}
	return func() {}
}

func (d *Deadline) Err() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.err
}

// Deadline: none that a callee could plan by (it may be held).
func (d *Deadline) Deadline() (time.Time, bool) { return time.Time{}, false }

func (d *Deadline) end(err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.err != nil {
		return
	}
	d.err = err
	d.timer.Stop()
	close(d.done)
}

// Hold stops the clock until the returned func is called (holds nest).
func (d *Deadline) Hold() (resume func()) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.held++; d.held == 1 && d.err == nil && d.timer.Stop() {
		d.left -= time.Since(d.since)
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			d.mu.Lock()
			defer d.mu.Unlock()
			if d.held--; d.held == 0 && d.err == nil {
				d.since = time.Now()
				d.timer.Reset(max(d.left, 0))
			}
		})
	}
}
