package engine

import (
	"context"
	"maps"
	"slices"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/types"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/siteops/siteops/internal/mirror/gitwriter"
	"github.com/siteops/siteops/internal/mirror/metrics"
	"github.com/siteops/siteops/internal/mirror/watch"
)

// How runners start and stop. The engine's lock is held only to change its maps and to start or
// cancel goroutines, never while one stops: a writer's last push to a remote that never answers
// takes up to StopTimeout, and a tenant can make its writer restart at will (by editing its
// GitProvider or Secret). A runner that replaces another (the same writer key, or the same
// stream of a target) waits, on its own goroutine, until its predecessor stopped, so two
// writers of one branch or two watches of one stream never run at once, and a restarted stream
// resumes from the cursor its writer's last push recorded.

// stopMargin is how long Start waits for stopping runners beyond StopTimeout.
const stopMargin = 2 * time.Second

// runner is one goroutine of the engine: a watch stream or a writer.
type runner struct {
	cancel context.CancelFunc
	done   chan struct{}
}

// launch runs fn on a goroutine of its own once every gate is closed. It waits for the gates
// even when cancelled meanwhile, so a closed done also says every runner it replaced stopped.
func (e *Engine) launch(log logr.Logger, gates []<-chan struct{}, fn func(context.Context)) *runner {
	ctx, cancel := context.WithCancel(e.ctx)
	ctx = logf.IntoContext(ctx, log)
	r := &runner{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		for _, g := range gates {
			<-g
		}
		fn(ctx)
	}()
	return r
}

// gatesOf returns the gates named by keys that are still closing.
func (e *Engine) gatesOf(keys ...string) []<-chan struct{} {
	var out []<-chan struct{}
	for _, k := range keys {
		if g := e.gates[k]; g != nil {
			out = append(out, g)
		}
	}
	return out
}

// stopInBackground records that the runner behind gate key is stopping until done closes: its
// successor waits for it, and so does Start. e.mu is held.
func (e *Engine) stopInBackground(key string, done <-chan struct{}) {
	e.gates[key] = done
	e.stopping.Add(1)
	go func() {
		defer e.stopping.Done()
		<-done
		e.mu.Lock()
		if e.gates[key] == done {
			delete(e.gates, key)
		}
		e.mu.Unlock()
	}()
}

// waitStopped waits until every stopping runner stopped, at most StopTimeout plus a margin.
func (e *Engine) waitStopped(log logr.Logger) error {
	done := make(chan struct{})
	go func() { e.stopping.Wait(); close(done) }()
	timer := time.NewTimer(e.stopTimeout() + stopMargin)
	defer timer.Stop()
	select {
	case <-done:
	case <-timer.C:
		log.Info("some git writers did not stop in time; their unpushed changes are replayed by the next leader", "waited", e.stopTimeout()+stopMargin)
	}
	return nil
}

func (e *Engine) stopTimeout() time.Duration {
	if e.StopTimeout > 0 {
		return e.StopTimeout
	}
	return gitwriter.DefaultStopTimeout
}

func writerGate(key string) string { return "writer\x00" + key }

func streamGate(target types.NamespacedName, k streamKey) string {
	return "stream\x00" + target.String() + "\x00" + k.gvr.String() + "\x00" + k.ns
}

func (e *Engine) startWriter(key string, spec WriterSpec) *writerRun {
	wr := &writerRun{key: key, spec: spec, refs: map[types.NamespacedName]bool{}}
	e.launchWriter(wr)
	e.writers[key] = wr
	return wr
}

// launchWriter starts wr's writer once the previous writer of its key stopped.
func (e *Engine) launchWriter(wr *writerRun) {
	cfg := gitwriter.Config{URL: wr.spec.URL, Branch: wr.spec.Branch, Auth: wr.spec.Auth, Committer: wr.spec.Committer, Window: wr.spec.Window, Signer: wr.spec.Signer,
		StopTimeout: e.stopTimeout(), OnCommits: e.commits.record}
	if e.cursors != nil {
		cfg.Cursors = e.cursors
	}
	if e.WriterHook != nil {
		e.WriterHook(&cfg)
	}
	w := gitwriter.New(cfg)
	wr.w = w
	w.OnStatusChange(func() {
		if e.OnTargetChange == nil {
			return
		}
		for _, r := range wr.refList() {
			e.OnTargetChange(r)
		}
	})
	log := logf.FromContext(e.ctx).WithName("mirror-writer")
	wr.run = e.launch(log, e.gatesOf(writerGate(wr.key)), func(ctx context.Context) { _ = w.Run(ctx) })
}

// retireWriter stops wr's current writer in the background, after the streams in after stopped
// (so it takes what they handed over), and makes it the gate of the writer's successor.
func (e *Engine) retireWriter(wr *writerRun, after []*runner) {
	run := wr.run
	stopped := make(chan struct{})
	metrics.WritersStopping.Inc()
	go func() {
		defer close(stopped)
		defer metrics.WritersStopping.Dec()
		for _, r := range after {
			<-r.done
		}
		run.cancel()
		<-run.done
	}()
	e.stopInBackground(writerGate(wr.key), stopped)
}

// restartWriter replaces a writer whose settings changed. Its targets' streams are stopped
// first and restarted after the old writer's last push, so they resume from the cursors it
// recorded.
func (e *Engine) restartWriter(wr *writerRun, spec WriterSpec) {
	type restart struct {
		target types.NamespacedName
		t      *targetRun
		specs  []StreamSpec
	}
	var rs []restart
	var stopped []*runner
	for _, ref := range wr.refList() {
		t := e.targets[ref]
		if t == nil {
			continue
		}
		var specs []StreamSpec
		for _, r := range t.streams {
			specs = append(specs, r.spec)
		}
		rs = append(rs, restart{ref, t, specs})
		stopped = append(stopped, e.detachStreams(ref, t, slices.Collect(maps.Keys(t.streams)))...)
	}
	e.retireWriter(wr, stopped)
	wr.spec = spec
	e.launchWriter(wr)
	for _, r := range rs {
		for _, s := range r.specs {
			e.startStream(r.target, r.t, wr, s)
		}
	}
}

// startStream starts a watch of target once the stream it replaces and the writer generation it
// hands ops to are clear of their predecessors.
func (e *Engine) startStream(target types.NamespacedName, t *targetRun, wr *writerRun, s StreamSpec) {
	k := streamKey{s.GVR, s.Namespace}
	cfg := watch.Config{
		Client: e.dyn, Watcher: e.feeds, GVR: s.GVR, Namespace: s.Namespace, TargetUID: t.spec.UID, BasePath: t.spec.Path,
		IgnoreDeletes: t.spec.IgnoreDeletes, Operations: s.Operations, Sink: targetSink{w: wr.w, uid: t.spec.UID}, IgnoreCursor: t.spec.Replay,
		OnReplay: func(reason string) {
			e.statsMu.Lock()
			t.replays[reason]++
			e.statsMu.Unlock()
		},
	}
	if e.cursors != nil {
		cfg.Cursors = e.cursors
	}
	cfg.IgnoreFieldManagers, cfg.IgnoreUsers = s.IgnoreFieldManagers, s.IgnoreUsers
	if t.secrets != nil {
		cfg.Secrets = t.secrets
	}
	cfg.LogValues = []any{"gitTarget", target.String()}
	if e.StreamHook != nil {
		e.StreamHook(target, t.spec.UID, &cfg)
	}
	log := logf.FromContext(e.ctx).WithName("mirror-watch")
	st := watch.New(cfg)
	run := e.launch(log, e.gatesOf(streamGate(target, k), writerGate(wr.key)), func(ctx context.Context) {
		if ctx.Err() == nil {
			_ = st.Run(ctx)
		}
	})
	t.streams[k] = &streamRun{run: run, spec: s}
}

// detachStreams cancels the streams of target named by keys and returns them; they stop in the
// background. The stream end hook is told at once, before any successor's stream hook.
func (e *Engine) detachStreams(target types.NamespacedName, t *targetRun, keys []streamKey) []*runner {
	var out []*runner
	for _, k := range keys {
		if r, ok := t.streams[k]; ok {
			r.run.cancel()
			e.stopInBackground(streamGate(target, k), r.run.done)
			out = append(out, r.run)
			if e.StreamEndHook != nil {
				e.StreamEndHook(target, k.gvr, k.ns)
			}
		}
		delete(t.streams, k)
	}
	return out
}
