package devenv

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// ManagerLogName is the manager's log file in LogDir.
const ManagerLogName = "manager.log"

// LogDir is the folder holding the logs of the environment o describes: the manager's and the
// API server's; the other servers' logs are next to their data, and the table Up prints names
// each one.
func LogDir(o Options) (string, error) {
	state, err := stateDir(o)
	if err != nil {
		return "", err
	}
	return filepath.Join(state, "logs"), nil
}

// OpenManagerLog creates (or empties) the manager's log file in LogDir, for the logger of the
// process that runs the manager.
func OpenManagerLog(o Options) (*os.File, error) {
	dir, err := LogDir(o)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("create log folder: %w", err)
	}
	f, err := os.OpenFile(filepath.Join(dir, ManagerLogName), os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, fmt.Errorf("create the manager's log: %w", err)
	}
	return f, nil
}

// logFile is one component's log.
type logFile struct{ name, path string }

// follower copies what components append to their logs to a writer, each line prefixed with
// the component's name (`siteops dev up -v`).
type follower struct {
	w      io.Writer
	mu     sync.Mutex // serialises lines of different files
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func newFollower(w io.Writer) *follower {
	ctx, cancel := context.WithCancel(context.Background())
	return &follower{w: w, ctx: ctx, cancel: cancel}
}

// follow streams path from its start; the file may not exist yet.
func (f *follower) follow(name, path string) {
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		var file *os.File
		defer func() {
			if file != nil {
				file.Close()
			}
		}()
		var r *bufio.Reader
		var partial []byte
		for {
			if file == nil {
				if opened, err := os.Open(path); err == nil {
					file, r = opened, bufio.NewReader(opened)
				}
			}
			for r != nil {
				line, err := r.ReadBytes('\n')
				partial = append(partial, line...)
				if err != nil { // io.EOF: the rest of the line is not written yet
					break
				}
				f.mu.Lock()
				fmt.Fprintf(f.w, "[%s] %s", name, partial)
				f.mu.Unlock()
				partial = partial[:0]
			}
			select {
			case <-f.ctx.Done():
				return
			case <-time.After(250 * time.Millisecond):
			}
		}
	}()
}

func (f *follower) stop() error {
	f.cancel()
	f.wg.Wait()
	return nil
}
