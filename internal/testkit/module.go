package testkit

import (
	"errors"
	"os"
	"path/filepath"
)

// ModuleRoot walks up from the working directory (a test's: its
// package's) to the directory holding go.mod, where ./bin is.
func ModuleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod above the working directory")
		}
		dir = parent
	}
}
