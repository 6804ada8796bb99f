package soak

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	mirrorv1alpha1 "github.com/siteops/siteops/api/mirror/v1alpha1"
	"github.com/siteops/siteops/internal/mirror/verify"
	"github.com/siteops/siteops/test/internal/nodeenv"
)

// mirrorUsers edit ConfigMaps of the mirrored namespace, each only its own (named after it), so
// every commit touching one has exactly one right author.
var mirrorUsers = []string{"alice", "bob", "carol"}

// windowUser edits the ConfigMaps of the namespace whose GitTarget holds changes in a long
// commit window, and closes the window with CommitRequests: every commit there is the user's.
const windowUser = "dave"

const (
	// committerName is the GitProvider's committer: the author of commits of state the
	// mirror found rather than a change it saw made.
	committerName = "Mirror Bot"
	// mirrorPath is the GitTarget's folder in the repository.
	mirrorPath = "clusters/soak"
	// configMapsPerUser bounds each user's ConfigMaps.
	configMapsPerUser = 4
)

// mirrorLoad is a mirrored namespace, its bare repository, and the users' clients.
type mirrorLoad struct {
	ns, bare string
	users    map[string]client.Client
	// edits counts the users' changes the API server accepted; canary counts the admin's.
	edits, refused, canary atomic.Int64
	// since is when the namespace was made: the audit log is replayed from then.
	since time.Time
}

// dir is the repository folder of the namespace's ConfigMaps.
func (m *mirrorLoad) dir() string { return mirrorPath + "/" + m.ns + "/core/configmaps" }

// setupMirror creates the mirrored namespaces: one whose GitTarget commits every change at once,
// edited by mirrorUsers, and one whose GitTarget holds changes for an hour, edited by
// windowUser, who closes the window with CommitRequests. It waits until both watches run.
func (s *soak) setupMirror(t *testing.T) {
	s.mirror = s.newMirror(t, "mirror", 0, mirrorUsers)
	took := s.mirrorCanary(t, 90*time.Second)
	t.Logf("the mirror commits the namespace's ConfigMaps (first canary after %s)", took.Round(time.Millisecond))
	s.windowed = s.newMirror(t, "window", time.Hour, []string{windowUser})
	took = nodeenv.WaitFor(t, 90*time.Second, "a first CommitRequest", func(ctx context.Context) error {
		_, err := s.windowed.commitRequest(ctx, "first")
		return err
	})
	t.Logf("the windowed target commits on request (first CommitRequest after %s)", took.Round(time.Millisecond))
}

// newMirror creates a namespace with a GitTarget of window on a new repository of the git
// remote, watching its ConfigMaps, and users bound to edit in it.
func (s *soak) newMirror(t *testing.T, name string, window time.Duration, users []string) *mirrorLoad {
	ctx := context.Background()
	m := &mirrorLoad{users: map[string]client.Client{}, since: time.Now()}
	m.ns = s.Namespace(t, "soak-"+name, nil)
	url, err := s.Git.CreateRepo(name, "main")
	nodeenv.Must(t, err, "create the %s repository", name)
	m.bare = s.Git.RepoDir(name)
	objs := []client.Object{
		&mirrorv1alpha1.GitProvider{
			ObjectMeta: metav1.ObjectMeta{Name: "remote", Namespace: m.ns},
			Spec: mirrorv1alpha1.GitProviderSpec{URL: url, AllowedBranches: []string{"main"},
				Committer: mirrorv1alpha1.Committer{Name: committerName, Email: "mirror@example.com"}},
		},
		&mirrorv1alpha1.GitTarget{
			ObjectMeta: metav1.ObjectMeta{Name: "main", Namespace: m.ns},
			Spec: mirrorv1alpha1.GitTargetSpec{ProviderRef: corev1.LocalObjectReference{Name: "remote"}, Branch: "main",
				Path: mirrorPath, CommitWindow: &metav1.Duration{Duration: window}},
		},
		&mirrorv1alpha1.WatchRule{
			ObjectMeta: metav1.ObjectMeta{Name: "configmaps", Namespace: m.ns},
			Spec: mirrorv1alpha1.WatchRuleSpec{TargetRef: mirrorv1alpha1.TargetReference{Name: "main"},
				Rules: []mirrorv1alpha1.ResourceRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}}}},
		},
	}
	for _, user := range users {
		u, err := s.C.Env.AddUser(envtest.User{Name: user}, nil)
		nodeenv.Must(t, err, "add user %s", user)
		c, err := client.New(u.Config(), client.Options{Scheme: s.C.Scheme})
		nodeenv.Must(t, err, "client of %s", user)
		m.users[user] = c
		objs = append(objs, &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Namespace: m.ns, Name: user + "-edit"},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "edit"},
			Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}},
		})
	}
	for _, o := range objs {
		nodeenv.Must(t, s.C.Client.Create(ctx, o), "create %T %s", o, o.GetName())
	}
	return m
}

// userEdit makes one random change as user to one of its ConfigMaps: create, update, delete,
// or now and then a collection delete of all of them.
func (m *mirrorLoad) userEdit(ctx context.Context, rng *rand.Rand, user string) {
	c := m.users[user]
	name := fmt.Sprintf("%s-%d", user, rng.IntN(configMapsPerUser))
	var err error
	switch p := rng.IntN(20); {
	case p == 0:
		err = c.DeleteAllOf(ctx, &corev1.ConfigMap{}, client.InNamespace(m.ns), client.MatchingLabels{"owner": user})
	case p < 4:
		err = c.Delete(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: m.ns}})
	default:
		var cm corev1.ConfigMap
		err = c.Get(ctx, client.ObjectKey{Namespace: m.ns, Name: name}, &cm)
		value := fmt.Sprintf("%d", rng.Uint32())
		switch {
		case apierrors.IsNotFound(err):
			cm = corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: m.ns, Labels: map[string]string{"owner": user}},
				Data: map[string]string{"value": value}}
			err = c.Create(ctx, &cm)
		case err == nil:
			cm.Data = map[string]string{"value": value}
			err = c.Update(ctx, &cm)
		}
	}
	if err != nil && !apierrors.IsNotFound(err) {
		m.refused.Add(1)
		return
	}
	m.edits.Add(1)
}

// mirrorCanary has the admin write a new value to the ConfigMap "canary" and waits until git
// holds it: the mirror is committing.
func (s *soak) mirrorCanary(t *testing.T, timeout time.Duration) time.Duration {
	m := s.mirror
	n := m.canary.Add(1)
	want := fmt.Sprintf("canary-%d", n)
	start := time.Now()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "canary", Namespace: m.ns}}
	err := s.retry(timeout, func(ctx context.Context) error {
		err := s.C.Client.Get(ctx, client.ObjectKeyFromObject(cm), cm)
		cm.Data = map[string]string{"value": want}
		if apierrors.IsNotFound(err) {
			return s.C.Client.Create(ctx, cm)
		}
		if err != nil {
			return err
		}
		return s.C.Client.Update(ctx, cm)
	})
	if err == nil {
		err = s.retry(timeout-time.Since(start), func(context.Context) error {
			return nodeenv.GitFileHas(m.bare, m.dir()+"/canary.yaml", want)
		})
	}
	if err != nil {
		t.Errorf("mirror canary %s: %v", want, err)
		return -1
	}
	return time.Since(start)
}

// cursorsDurable reports nil once both GitTargets' cursors are in Redis again.
func (s *soak) cursorsDurable(ctx context.Context) error {
	for _, m := range s.mirrors() {
		var gt mirrorv1alpha1.GitTarget
		if err := s.C.Client.Get(ctx, client.ObjectKey{Namespace: m.ns, Name: "main"}, &gt); err != nil {
			return err
		}
		if c := meta.FindStatusCondition(gt.Status.Conditions, mirrorv1alpha1.ConditionCursorsDurable); c == nil || c.Status != metav1.ConditionTrue {
			return fmt.Errorf("%s: CursorsDurable %+v", m.ns, c)
		}
	}
	return nil
}

// mirrors are the mirrored namespaces.
func (s *soak) mirrors() []*mirrorLoad { return []*mirrorLoad{s.mirror, s.windowed} }

// mirrorMatchesCluster reports nil when, for both mirrored namespaces, every ConfigMap is in git
// with its data, and git holds no other.
func (s *soak) mirrorMatchesCluster(ctx context.Context) error {
	for _, m := range s.mirrors() {
		if err := s.matchesCluster(ctx, m); err != nil {
			return fmt.Errorf("%s: %w", m.ns, err)
		}
	}
	return nil
}

// matchesCluster compares one mirrored namespace with its repository.
func (s *soak) matchesCluster(ctx context.Context, m *mirrorLoad) error {
	var list corev1.ConfigMapList
	if err := s.C.Client.List(ctx, &list, client.InNamespace(m.ns)); err != nil {
		return err
	}
	files, err := nodeenv.GitOut(m.bare, "ls-tree", "--name-only", "main", m.dir()+"/")
	if err != nil {
		return err
	}
	inGit := map[string]bool{}
	for _, f := range strings.Fields(files) {
		inGit[strings.TrimSuffix(f[strings.LastIndex(f, "/")+1:], ".yaml")] = true
	}
	for _, cm := range list.Items {
		if cm.Name == "kube-root-ca.crt" {
			continue // published by the cluster in every namespace; the mirror leaves it out
		}
		if !inGit[cm.Name] {
			return fmt.Errorf("ConfigMap %s is not in git", cm.Name)
		}
		delete(inGit, cm.Name)
		body, err := nodeenv.GitOut(m.bare, "show", "main:"+m.dir()+"/"+cm.Name+".yaml")
		if err != nil {
			return err
		}
		var committed corev1.ConfigMap
		if err := yaml.Unmarshal([]byte(body), &committed); err != nil {
			return fmt.Errorf("%s.yaml: %w", cm.Name, err)
		}
		if fmt.Sprint(committed.Data) != fmt.Sprint(cm.Data) {
			return fmt.Errorf("ConfigMap %s holds %v, git %v", cm.Name, cm.Data, committed.Data)
		}
	}
	for name := range inGit {
		return fmt.Errorf("git holds %s.yaml, the cluster has no such ConfigMap", name)
	}
	return nil
}

// authorCheck counts the commits touching each user's ConfigMaps by who authored them: the
// user (attributed), the committer (state found, not a change seen), or anyone else (wrong).
type authorCheck struct {
	Attributed, ByCommitter, Wrong int
	WrongExamples                  []string `json:",omitempty"`
}

// checkAuthors reads the history of every user's ConfigMap files.
func (s *soak) checkAuthors() (authorCheck, error) {
	var a authorCheck
	for _, m := range s.mirrors() {
		if err := m.checkAuthors(&a); err != nil {
			return a, err
		}
	}
	return a, nil
}

// checkAuthors counts the authors of the namespace's users' ConfigMap files into a.
func (m *mirrorLoad) checkAuthors(a *authorCheck) error {
	for user := range m.users {
		for i := range configMapsPerUser {
			file := fmt.Sprintf("%s/%s-%d.yaml", m.dir(), user, i)
			log, err := nodeenv.GitOut(m.bare, "log", "--format=%H %an", "main", "--", file)
			if err != nil {
				return err
			}
			for _, line := range strings.Split(log, "\n") {
				sha, author, ok := strings.Cut(line, " ")
				switch {
				case !ok:
				case author == user:
					a.Attributed++
				case author == committerName:
					a.ByCommitter++
				default:
					a.Wrong++
					if len(a.WrongExamples) < 5 {
						a.WrongExamples = append(a.WrongExamples, fmt.Sprintf("%.10s changed %s by %s", sha, file, author))
					}
				}
			}
		}
	}
	return nil
}

// verifyAuthors replays the API server's audit log against both repositories, as `siteops
// mirror verify` does, and reports recall; a change under another author than the log's user is
// an error.
func (s *soak) verifyAuthors() (string, error) {
	f, err := os.Open(nodeenv.AuditLog())
	if err != nil {
		return "", fmt.Errorf("open the audit log: %w", err)
	}
	defer f.Close()
	// Only the mirrored namespaces' events: the log also holds an hour of every tenant's writes.
	var keep bytes.Buffer
	r := bufio.NewReaderSize(f, 1<<20)
	for {
		line, err := r.ReadBytes('\n')
		for _, m := range s.mirrors() {
			if bytes.Contains(line, []byte(`"namespace":"`+m.ns+`"`)) {
				keep.Write(line)
				break
			}
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return "", fmt.Errorf("read the audit log: %w", err)
		}
	}
	log, err := verify.ReadAuditLog(&keep, s.mirror.since)
	if err != nil {
		return "", err
	}
	var summary []string
	var mismatches []string
	for _, m := range s.mirrors() {
		repo, err := verify.OpenRepository(m.bare)
		if err != nil {
			return "", err
		}
		rep, err := verify.Verify(repo, log, verify.Options{Since: m.since, Ref: "main"})
		if err != nil {
			return "", fmt.Errorf("verify %s: %w", m.ns, err)
		}
		truth, recalled := 0, 0
		for _, c := range rep.Classes {
			truth += c.Truth
			recalled += c.Recalled
		}
		summary = append(summary, fmt.Sprintf("%s: %d changes in %d commits, %d mismatches, recall %d/%d, %d missed, %d unverifiable",
			m.ns, rep.Changes, rep.Commits, len(rep.Mismatches), recalled, truth, len(rep.Missed), rep.Unverifiable))
		for _, ch := range rep.Mismatches[:min(3, len(rep.Mismatches))] {
			mismatches = append(mismatches, fmt.Sprintf("%.10s %s by %s, audit log: %s", ch.Commit, ch.Path, ch.Author.Name, ch.Truth))
		}
	}
	if len(mismatches) > 0 {
		return "", fmt.Errorf("%s; e.g. %s", strings.Join(summary, "; "), strings.Join(mismatches, "; "))
	}
	return strings.Join(summary, "; "), nil
}
