// Package verify replays a Kubernetes API server audit log against the history the mirror wrote
// to git: for each mirrored change, is the commit's author the user the audit log names?
package verify

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"time"

	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"

	"github.com/siteops/siteops/internal/mirror/audit"
)

// maxLine bounds one audit log line: a RequestResponse event carries up to two copies of an
// object (1.5 MiB each at most in etcd).
const maxLine = 16 << 20

// objectKey names a Kubernetes object as the mirror lays it out: "" namespace for cluster scope,
// "" group for core; name "" for a whole collection (a deletecollection's scope).
type objectKey struct {
	group, resource, namespace, name string
}

func (o objectKey) String() string {
	g := o.group
	if g == "" {
		g = "core"
	}
	ns := o.namespace
	if ns == "" {
		ns = "_cluster"
	}
	return ns + "/" + g + "/" + o.resource + "/" + o.name
}

// AuditLog holds the accepted, mutating events of an audit log (what attribution can use).
type AuditLog struct {
	byID map[string]*auditv1.Event
	// byObject lists each object's writes, and each scope's collection deletes (name ""), in
	// stage time order.
	byObject map[objectKey][]*auditv1.Event
	// Events counts the events kept; Lines the lines read.
	Events, Lines int
}

// ReadAuditLog reads JSON lines of audit.k8s.io/v1 Events, as kube-apiserver writes them with
// --audit-log-path (--audit-log-format=json, the default), keeping the completed, successful
// writes that the mirror's audit receiver would accept, stamped at or after since. An
// unreadable line is an error naming it.
func ReadAuditLog(r io.Reader, since time.Time) (*AuditLog, error) {
	l := &AuditLog{byID: map[string]*auditv1.Event{}, byObject: map[objectKey][]*auditv1.Event{}}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), maxLine)
	for sc.Scan() {
		l.Lines++
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		ev := &auditv1.Event{}
		if err := json.Unmarshal([]byte(line), ev); err != nil {
			return nil, fmt.Errorf("audit log line %d is not an audit.k8s.io/v1 Event: %w", l.Lines, err)
		}
		if ev.Kind != "" && ev.Kind != "Event" {
			return nil, fmt.Errorf("audit log line %d is a %q, want an audit.k8s.io/v1 Event (--audit-log-format=json)", l.Lines, ev.Kind)
		}
		if ok, _ := audit.Accept(ev); !ok || ev.StageTimestamp.Time.Before(since) {
			continue
		}
		l.Events++
		l.byID[string(ev.AuditID)] = ev
		o := eventObject(ev)
		l.byObject[o] = append(l.byObject[o], ev)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read the audit log after line %d: %w", l.Lines, err)
	}
	for _, evs := range l.byObject {
		sort.SliceStable(evs, func(i, j int) bool { return evs[i].StageTimestamp.Time.Before(evs[j].StageTimestamp.Time) })
	}
	return l, nil
}

// eventObject is the object an event wrote; a deletecollection names its scope (name "").
func eventObject(ev *auditv1.Event) objectKey {
	r := ev.ObjectRef
	o := objectKey{group: r.APIGroup, resource: r.Resource, namespace: r.Namespace, name: r.Name}
	if ev.Verb == "deletecollection" {
		o.name = ""
	}
	if o.name == "" && ev.Verb == "create" && ev.ResponseObject != nil {
		// generateName: only the response knows the name.
		var m struct {
			Metadata struct {
				Name string `json:"name"`
			} `json:"metadata"`
		}
		if json.Unmarshal(ev.ResponseObject.Raw, &m) == nil {
			o.name = m.Metadata.Name
		}
	}
	return o
}

// listedItems counts the objects a deletecollection response lists; ok=false when it has no list.
func listedItems(ev *auditv1.Event) (int, bool) {
	if ev.ResponseObject == nil {
		return 0, false
	}
	var body struct {
		Items *[]json.RawMessage `json:"items"`
	}
	if json.Unmarshal(ev.ResponseObject.Raw, &body) != nil || body.Items == nil {
		return 0, false
	}
	return len(*body.Items), true
}

// removes reports whether ev may have removed o: a delete of it, or a collection delete of its
// scope (whose response, when it has one, lists o).
func removes(ev *auditv1.Event, o objectKey) bool {
	switch ev.Verb {
	case "delete":
		return true
	case "deletecollection":
		if ev.ResponseObject == nil {
			return true
		}
		var body struct {
			Items *[]struct {
				Metadata struct {
					Name string `json:"name"`
				} `json:"metadata"`
			} `json:"items"`
		}
		if json.Unmarshal(ev.ResponseObject.Raw, &body) != nil || body.Items == nil {
			return true
		}
		for _, it := range *body.Items {
			if it.Metadata.Name == o.name {
				return true
			}
		}
	}
	return false
}

// truth finds the request that made a change to o committed at `at`. For a write, the last
// write of o stamped no later than at; for a removal, the first delete of o (or collection
// delete of its scope) since o was last created: the removal credit sticks to whoever deleted
// it first, not to a later delete while it waited for its finalizers.
func (l *AuditLog) truth(o objectKey, removal bool, at time.Time) *auditv1.Event {
	evs := l.byObject[o]
	if removal {
		scope := o
		scope.name = ""
		for _, ev := range l.byObject[scope] {
			if removes(ev, o) {
				evs = append(slices.Clone(evs), ev)
			}
		}
		sort.SliceStable(evs, func(i, j int) bool { return evs[i].StageTimestamp.Time.Before(evs[j].StageTimestamp.Time) })
	}
	var best *auditv1.Event
	for _, ev := range evs {
		if ev.StageTimestamp.After(at) {
			break
		}
		isRemoval := ev.Verb == "delete" || ev.Verb == "deletecollection"
		switch {
		case !removal && !isRemoval:
			best = ev
		case removal && ev.Verb == "create":
			best = nil
		case removal && isRemoval && best == nil:
			best = ev
		}
	}
	return best
}
