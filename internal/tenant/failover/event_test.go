package failover

import (
	"fmt"
	"testing"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/runtime"
)

func TestParseSwitch(t *testing.T) {
	sw, err := ParseSwitch("mymaster 127.0.0.1 6379 127.0.0.1 6380")
	if err != nil || sw != (Switch{Master: "mymaster", Old: "127.0.0.1:6379", New: "127.0.0.1:6380"}) {
		t.Fatalf("ParseSwitch = %+v, %v", sw, err)
	}
	if _, err := ParseSwitch("mymaster 127.0.0.1"); err == nil {
		t.Fatal("short message accepted")
	}
}

func TestParseNodeEvent(t *testing.T) {
	ev, ok := ParseNodeEvent("-sdown", "slave 127.0.0.1:6381 127.0.0.1 6381 @ mymaster 127.0.0.1 6380")
	if !ok || ev.Addr != "127.0.0.1:6381" || ev.Master != "mymaster" || ev.Type != "slave" {
		t.Fatalf("replica event = %+v %v", ev, ok)
	}
	ev, ok = ParseNodeEvent("+reboot", "master mymaster 127.0.0.1 6380")
	if !ok || ev.Addr != "127.0.0.1:6380" || ev.Master != "mymaster" {
		t.Fatalf("master event = %+v %v", ev, ok)
	}
	if _, ok := ParseNodeEvent("-sdown", "sentinel 0123abcd 127.0.0.1 26379 @ mymaster 127.0.0.1 6380"); ok {
		t.Fatal("sentinel event taken for a data node")
	}
	if _, ok := ParseNodeEvent("+slave", "garbage"); ok {
		t.Fatal("garbage accepted")
	}
}

type counter struct{ n int }

func (c *counter) Inc() { c.n++ }

// notes records the notes of the Events it is given.
type notes []string

func (n *notes) Eventf(_, _ runtime.Object, _, reason, _, note string, args ...any) {
	*n = append(*n, reason+": "+fmt.Sprintf(note, args...))
}

func TestHandleCountsEachFailoverOnce(t *testing.T) {
	c := &counter{}
	var events notes
	w := &Watcher{MasterName: "mymaster", Failovers: c, Events: &events, Namespace: "siteops-system"}
	w.init()
	log := logr.Discard()
	for _, s := range []string{"s1", "s2", "s3"} {
		w.handle(log, message{sentinel: s, channel: ChannelSwitchMaster, payload: "mymaster 10.0.0.1 6379 10.0.0.2 6379"})
	}
	if c.n != 1 || !w.all || w.prefer != "s1" {
		t.Fatalf("after three announcements of one failover: count %d all %v prefer %q", c.n, w.all, w.prefer)
	}
	w.handle(log, message{sentinel: "s2", channel: ChannelSwitchMaster, payload: "mymaster 10.0.0.2 6379 10.0.0.1 6379"})
	w.handle(log, message{sentinel: "s1", channel: ChannelSwitchMaster, payload: "other 10.0.0.9 6379 10.0.0.8 6379"})
	w.handle(log, message{sentinel: "s1", channel: ChannelSwitchMaster, payload: "bad"})
	if c.n != 2 {
		t.Fatalf("a failover back and an unrelated master: count %d, want 2", c.n)
	}
	// One Event per failover, naming where the master went, for alerts (Flux's included).
	if len(events) != 2 || events[0] != "ValkeyFailover: Sentinel failover of mymaster: the master moved from 10.0.0.1:6379 to 10.0.0.2:6379; every tenant's ACL user is applied on it and its replicas" {
		t.Fatalf("events %q", events)
	}
	w.handle(log, message{sentinel: "s1", channel: ChannelReboot, payload: "slave 10.0.0.3:6379 10.0.0.3 6379 @ mymaster 10.0.0.1 6379"})
	w.handle(log, message{sentinel: "s2", channel: ChannelReboot, payload: "slave 10.0.0.3:6379 10.0.0.3 6379 @ mymaster 10.0.0.1 6379"})
	w.handle(log, message{sentinel: "s2", channel: ChannelSdownCleared, payload: "slave 10.0.0.4:6379 10.0.0.4 6379 @ other 10.0.0.1 6379"})
	if len(w.nodes) != 1 || !w.nodes["10.0.0.3:6379"] {
		t.Fatalf("pending nodes %v", w.nodes)
	}
}
