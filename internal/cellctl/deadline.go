package cellctl

import (
	"context"
	"sync"
	"time"
)

// deadline is a command's --timeout: a context that ends with
// context.DeadlineExceeded once d has run, its clock stopped while held.
// A map change holds it while its data moves' steps run at the cells
// (control.MoveConfig.Hold): each call to a cell is bounded on its own,
// and a copy takes as long as the data does, which --timeout's 30 seconds
// were never meant to bound.
type deadline struct {
	context.Context // the parent: values, and its own end
	done            chan struct{}

	mu    sync.Mutex
	err   error
	left  time.Duration
	since time.Time // when the clock last started (held == 0)
	held  int
	timer *time.Timer
}

// withDeadline is parent ending after d of unheld time; stop frees it.
func withDeadline(parent context.Context, d time.Duration) (ctx *deadline, stop func()) {
	dl := &deadline{Context: parent, done: make(chan struct{}), left: d, since: time.Now()}
	dl.timer = time.AfterFunc(d, func() { dl.end(context.DeadlineExceeded) })
	go func() {
		select {
		case <-parent.Done():
			dl.end(parent.Err())
		case <-dl.done:
		}
	}()
	return dl, func() { dl.end(context.Canceled) }
}

func (d *deadline) Done() <-chan struct{} { return d.done }

func (d *deadline) Err() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.err
}

// Deadline: none that a callee could plan by (it may be held).
func (d *deadline) Deadline() (time.Time, bool) { return time.Time{}, false }

func (d *deadline) end(err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.err != nil {
		return
	}
	d.err = err
	d.timer.Stop()
	close(d.done)
}

// hold stops the clock until the returned func is called (holds nest).
func (d *deadline) hold() (resume func()) {
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
