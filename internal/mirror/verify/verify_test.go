package verify

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing/object"
	authnv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"

	"github.com/siteops/siteops/internal/mirror/attribution"
)

var t0 = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)

// logEvent is one audit log line: a completed write of a ConfigMap in "web".
func logEvent(id, verb, user, name string, at time.Duration, response string) auditv1.Event {
	ev := auditv1.Event{
		TypeMeta:                 metav1.TypeMeta{APIVersion: "audit.k8s.io/v1", Kind: "Event"},
		Level:                    auditv1.LevelRequestResponse,
		AuditID:                  types.UID(id),
		Stage:                    auditv1.StageResponseComplete,
		RequestURI:               "/api/v1/namespaces/web/configmaps",
		Verb:                     verb,
		User:                     authnv1.UserInfo{Username: user},
		ObjectRef:                &auditv1.ObjectReference{Resource: "configmaps", Namespace: "web", Name: name, APIVersion: "v1"},
		ResponseStatus:           &metav1.Status{Code: 200},
		RequestReceivedTimestamp: metav1.NewMicroTime(t0.Add(at - 10*time.Millisecond)),
		StageTimestamp:           metav1.NewMicroTime(t0.Add(at)),
	}
	if response != "" {
		ev.ResponseObject = &runtime.Unknown{Raw: []byte(response)}
	}
	return ev
}

func writeLog(t *testing.T, evs ...auditv1.Event) *bytes.Buffer {
	t.Helper()
	var b bytes.Buffer
	for _, ev := range evs {
		line, err := json.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		b.Write(line)
		b.WriteByte('\n')
	}
	// Events the receiver would not accept are skipped: a read, a failed write.
	get := logEvent("r1", "get", "alice", "a", 0, "")
	failed := logEvent("f1", "update", "mallory", "a", time.Second, "")
	failed.ResponseStatus.Code = 409
	for _, ev := range []auditv1.Event{get, failed} {
		line, _ := json.Marshal(ev)
		b.Write(line)
		b.WriteByte('\n')
	}
	return &b
}

type commitSpec struct {
	at      time.Duration
	author  string // "" = the committer
	write   []string
	remove  []string
	trailer string
}

func makeRepo(t *testing.T, commits []commitSpec) *git.Repository {
	t.Helper()
	dir := t.TempDir()
	repo, err := git.PlainInit(dir, false)
	if err != nil {
		t.Fatal(err)
	}
	wt, err := repo.Worktree()
	if err != nil {
		t.Fatal(err)
	}
	id := attribution.Identity{}
	for i, c := range commits {
		for _, name := range c.write {
			p := filepath.Join("clusters/prod/web/core/configmaps", name+".yaml")
			if err := os.MkdirAll(filepath.Join(dir, filepath.Dir(p)), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, p), fmt.Appendf(nil, "commit: %d\n", i), 0o644); err != nil {
				t.Fatal(err)
			}
			if _, err := wt.Add(p); err != nil {
				t.Fatal(err)
			}
		}
		for _, name := range c.remove {
			if _, err := wt.Remove(filepath.Join("clusters/prod/web/core/configmaps", name+".yaml")); err != nil {
				t.Fatal(err)
			}
		}
		when := t0.Add(c.at)
		committer := object.Signature{Name: "Mirror Bot", Email: "mirror@example.com", When: when}
		author := committer
		if c.author != "" {
			sig := id.Signature(factOf(&auditv1.Event{User: authnv1.UserInfo{Username: c.author}}))
			author = object.Signature{Name: sig.Name, Email: sig.Email, When: when}
		}
		msg := fmt.Sprintf("[BATCH] commit %d", i)
		if c.trailer != "" {
			msg += "\n\n" + c.trailer
		}
		if _, err := wt.Commit(msg, &git.CommitOptions{Author: &author, Committer: &committer}); err != nil {
			t.Fatal(err)
		}
	}
	return repo
}

func TestVerify(t *testing.T) {
	const sa = "system:serviceaccount:ops:bot"
	log, err := ReadAuditLog(writeLog(t,
		logEvent("A0", "create", "carol", "b", -time.Second, `{"metadata":{"name":"b"}}`),
		logEvent("A1", "create", "alice", "a", 100*time.Millisecond, `{"metadata":{"name":"a"}}`),
		logEvent("A2", "update", "bob", "a", time.Second, `{"metadata":{"name":"a"}}`),
		logEvent("A3", "delete", "alice", "b", 2*time.Second, `{"kind":"Status"}`),
		// dora's collection delete was audited at the Metadata level: no list of objects.
		logEvent("A4", "deletecollection", "dora", "", 3*time.Second, ""),
		logEvent("A5", "create", "erin", "d", 4*time.Second, `{"metadata":{"name":"d"}}`),
		logEvent("A6", "patch", sa, "f", 5*time.Second, `{"metadata":{"name":"f"}}`),
	), time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if log.Events != 7 || log.Lines != 9 {
		t.Fatalf("kept %d events of %d lines, want 7 of 9", log.Events, log.Lines)
	}
	repo := makeRepo(t, []commitSpec{
		// A replay by the committer: b's create is in the log (missed), the others are not.
		{at: -500 * time.Millisecond, write: []string{"b", "c1", "c2", "f"}},
		{at: 500 * time.Millisecond, author: "alice", write: []string{"a"}, trailer: "Audit-ID: A1\nAttribution: exact_user\nCluster: prod"},
		{at: 1500 * time.Millisecond, author: "bob", write: []string{"a"}, trailer: "Audit-ID: A2\nAttribution: exact_user\nCluster: prod"},
		// b's removal credited to its earlier writer: a mismatch.
		{at: 2500 * time.Millisecond, author: "carol", remove: []string{"b"}, trailer: "Audit-ID: A0\nAttribution: weak\nCluster: prod"},
		{at: 3500 * time.Millisecond, author: "dora", remove: []string{"c1", "c2"}, trailer: "Audit-ID: A4\nAttribution: exact_deletecollection_scope\nCluster: prod"},
		{at: 4500 * time.Millisecond, write: []string{"d"}, trailer: "Attribution: absent\nCluster: prod"},
		{at: 5500 * time.Millisecond, author: sa, write: []string{"f"}, trailer: "Audit-ID: A6\nAttribution: exact_serviceaccount\nCluster: prod"},
	})
	rep, err := Verify(repo, log, Options{})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := rep.Print(&out); err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + out.String())
	if rep.Commits != 7 || rep.Changes != 11 || rep.Unverifiable != 3 {
		t.Errorf("commits %d changes %d unverifiable %d, want 7, 11, 3", rep.Commits, rep.Changes, rep.Unverifiable)
	}
	want := map[string]ClassStats{
		// By the log: a's two writes, b's removal by alice, b's create by carol, d's create by erin.
		"exact_user":                   {Claimed: 2, Correct: 2, Truth: 5, Recalled: 2},
		"exact_serviceaccount":         {Claimed: 1, Correct: 1, Truth: 1, Recalled: 1},
		"exact_deletecollection_scope": {Claimed: 2, Correct: 2, Truth: 2, Recalled: 2},
		"weak":                         {Claimed: 1},
		"absent":                       {Claimed: 2},
	}
	for class, w := range want {
		if got := rep.Classes[class]; got == nil || *got != w {
			t.Errorf("%s: %+v, want %+v", class, got, w)
		}
	}
	if len(rep.Mismatches) != 1 || rep.Mismatches[0].Path != "clusters/prod/web/core/configmaps/b.yaml" || rep.Mismatches[0].Expected.Name != "alice" {
		t.Errorf("mismatches = %+v, want b's removal (alice's, credited to carol)", rep.Mismatches)
	}
	if len(rep.Missed) != 2 {
		t.Errorf("missed = %+v, want b's create and d's create", rep.Missed)
	}
	for _, want := range []string{"weak  ", "0.0%", "mismatches (1):", "removal clusters/prod/web/core/configmaps/b.yaml [weak, audit A0]: author carol <carol@users.noreply.invalid>, audit log: alice <alice@users.noreply.invalid>"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report lacks %q", want)
		}
	}
	if err := rep.Err(true, false); !errors.Is(err, ErrMismatch) || !strings.Contains(err.Error(), "1 of 11") {
		t.Errorf("Err(true, false) = %v", err)
	}
	if err := rep.Err(true, true); err == nil || !strings.Contains(err.Error(), "3 of 11") {
		t.Errorf("Err(true, true) = %v", err)
	}
	if err := rep.Err(false, false); err != nil {
		t.Errorf("Err(false, false) = %v", err)
	}

	// --since skips earlier commits; --cluster keeps only that cluster's commits.
	rep, err = Verify(repo, log, Options{Since: t0.Add(3 * time.Second)})
	if err != nil || rep.Commits != 3 || len(rep.Mismatches) != 0 {
		t.Errorf("since: %+v, %v", rep, err)
	}
	rep, err = Verify(repo, log, Options{Cluster: "staging"})
	if err != nil || rep.Commits != 0 {
		t.Errorf("other cluster: %+v, %v", rep, err)
	}
}

func TestReadAuditLogRejectsOtherContent(t *testing.T) {
	good, _ := json.Marshal(logEvent("A1", "create", "alice", "a", 0, ""))
	for name, body := range map[string]string{
		"not json":     string(good) + "\n{broken\n",
		"legacy lines": "AUDIT: id=\"x\" stage=\"ResponseComplete\" ip=\"1.2.3.4\" method=\"create\"\n",
		"an EventList": `{"kind":"EventList","apiVersion":"audit.k8s.io/v1","items":[]}` + "\n",
	} {
		t.Run(name, func(t *testing.T) {
			_, err := ReadAuditLog(strings.NewReader(body), time.Time{})
			if err == nil || !strings.Contains(err.Error(), "audit log line") {
				t.Fatalf("err = %v, want one naming the line", err)
			}
		})
	}
	log, err := ReadAuditLog(strings.NewReader(string(good)+"\n\n"), t0.Add(time.Second))
	if err != nil || log.Events != 0 {
		t.Fatalf("an event before --since kept: %+v, %v", log, err)
	}
}

func TestTrailers(t *testing.T) {
	got := Trailers("[BATCH] 2 changes\n\n[UPDATE] v1/configmaps/web/a\n\nAudit-ID: x\nAudit-ID: y\nAttribution: exact_user\nCluster: prod\n")
	if fmt.Sprint(got) != "map[Attribution:[exact_user] Audit-ID:[x y] Cluster:[prod]]" {
		t.Fatalf("trailers = %v", got)
	}
}

// Two writes of one file in one commit window make one change naming both requests: the last
// write is the one the file holds, so its author must be the commit's.
func TestVerifyCollapsedWrites(t *testing.T) {
	log, err := ReadAuditLog(writeLog(t,
		logEvent("A1", "create", "alice", "a", 100*time.Millisecond, `{"metadata":{"name":"a"}}`),
		logEvent("A2", "update", "bob", "a", 200*time.Millisecond, `{"metadata":{"name":"a"}}`),
	), time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	for author, mismatches := range map[string]int{"bob": 0, "alice": 1} {
		repo := makeRepo(t, []commitSpec{{at: time.Second, author: author, write: []string{"a"}, trailer: "Audit-ID: A1\nAudit-ID: A2\nAttribution: exact_user\nCluster: prod"}})
		rep, err := Verify(repo, log, Options{})
		if err != nil {
			t.Fatal(err)
		}
		if len(rep.Mismatches) != mismatches || rep.Changes != 1 {
			t.Errorf("authored by %s: %d changes, mismatches %+v; want %d", author, rep.Changes, rep.Mismatches, mismatches)
		}
	}
}
