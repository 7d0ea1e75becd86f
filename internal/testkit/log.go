package testkit

import (
	"bytes"
	"log/slog"
	"os"
	"sync"
)

// EnvLog names the environment variable that makes Logger write to stderr:
// CELLKIT_TEST_LOG=1 go test -v ./internal/cell shows the cell's logs.
const EnvLog = "CELLKIT_TEST_LOG"

// Logger returns the logger to give the code under test: it discards
// everything, unless $CELLKIT_TEST_LOG is set, then it writes every level
// as text to stderr.
func Logger() *slog.Logger {
	if os.Getenv(EnvLog) != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

// Buffer is a log sink a test reads while the code under test writes to it
// from many goroutines: a bytes.Buffer safe for concurrent Write and String.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *Buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *Buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Logger returns a logger that writes records of level and above as text
// (key=value) lines into the buffer.
func (s *Buffer) Logger(level slog.Level) *slog.Logger {
	return slog.New(slog.NewTextHandler(s, &slog.HandlerOptions{Level: level}))
}
