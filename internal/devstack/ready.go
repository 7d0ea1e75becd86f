package devstack

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Probe reports whether url answers 200 within a second.
func Probe(ctx context.Context, hc *http.Client, url string) bool {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return false
	}
	resp, err := hc.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// WaitReady probes every child's Ready URL until each has answered 200. It
// fails when a child ends meanwhile (saying how, with the last lines of its
// log), when within has passed (naming those not ready) or when ctx ends.
func WaitReady(ctx context.Context, hc *http.Client, within time.Duration, children ...*Child) error {
	deadline := time.Now().Add(within)
	ready := make([]bool, len(children))
	for {
		left := 0
		for i, c := range children {
			if ready[i] {
				continue
			}
			if how, ended := c.Ended(); ended {
				return fmt.Errorf("%s exited while starting (%s); last lines of %s: %s", c.Name, how, c.Log, LogTail(c.Log, 5))
			}
			if ready[i] = Probe(ctx, hc, c.Ready); !ready[i] {
				left++
			}
		}
		if left == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			var names []string
			for i, c := range children {
				if !ready[i] {
					names = append(names, c.Name)
				}
			}
			return fmt.Errorf("not ready within %v: %s (see their logs in %s)", within, strings.Join(names, ", "), filepath.Dir(children[0].Log))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("interrupted while waiting for the stack: %w", ctx.Err())
		case <-time.After(readyPoll):
		}
	}
}

// LogTail is the last n lines of the file at path, joined with " | ", for
// an error message; "(no log)" when it cannot be read.
func LogTail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "(no log)"
	}
	return Tail(string(b), n)
}

// Tail is the last n lines of s, joined with " | ".
func Tail(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}
