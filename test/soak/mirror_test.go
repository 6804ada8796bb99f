package soak

import (
	"context"
	"fmt"
	"math/rand/v2"
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
	"github.com/siteops/siteops/test/internal/nodeenv"
)

// mirrorUsers edit ConfigMaps of the mirrored namespace, each only its own (named after it), so
// every commit touching one has exactly one right author.
var mirrorUsers = []string{"alice", "bob", "carol"}

const (
	// committerName is the GitProvider's committer: the author of commits of state the
	// mirror found rather than a change it saw made.
	committerName = "Mirror Bot"
	// mirrorPath is the GitTarget's folder in the repository.
	mirrorPath = "clusters/soak"
	// configMapsPerUser bounds each user's ConfigMaps.
	configMapsPerUser = 4
)

// mirrorLoad is the mirrored namespace, its bare repository, and the users' clients.
type mirrorLoad struct {
	ns, bare string
	users    map[string]client.Client
	// edits counts the users' changes the API server accepted; canary counts the admin's.
	edits, refused, canary atomic.Int64
}

// dir is the repository folder of the namespace's ConfigMaps.
func (m *mirrorLoad) dir() string { return mirrorPath + "/" + m.ns + "/core/configmaps" }

// setupMirror creates the mirrored namespace with a GitTarget on the git remote watching its
// ConfigMaps, and the users bound to edit in it; it waits until the watch runs.
func (s *soak) setupMirror(t *testing.T) {
	ctx := context.Background()
	m := &mirrorLoad{users: map[string]client.Client{}}
	m.ns = s.Namespace(t, "soak-mirror", nil)
	url, err := s.Git.CreateRepo("mirror", "main")
	nodeenv.Must(t, err, "create the mirror repository")
	m.bare = s.Git.RepoDir("mirror")
	objs := []client.Object{
		&mirrorv1alpha1.GitProvider{
			ObjectMeta: metav1.ObjectMeta{Name: "remote", Namespace: m.ns},
			Spec: mirrorv1alpha1.GitProviderSpec{URL: url, AllowedBranches: []string{"main"},
				Committer: mirrorv1alpha1.Committer{Name: committerName, Email: "mirror@example.com"}},
		},
		&mirrorv1alpha1.GitTarget{
			ObjectMeta: metav1.ObjectMeta{Name: "main", Namespace: m.ns},
			Spec: mirrorv1alpha1.GitTargetSpec{ProviderRef: corev1.LocalObjectReference{Name: "remote"}, Branch: "main",
				Path: mirrorPath, CommitWindow: &metav1.Duration{}},
		},
		&mirrorv1alpha1.WatchRule{
			ObjectMeta: metav1.ObjectMeta{Name: "configmaps", Namespace: m.ns},
			Spec: mirrorv1alpha1.WatchRuleSpec{TargetRef: mirrorv1alpha1.TargetReference{Name: "main"},
				Rules: []mirrorv1alpha1.ResourceRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}}}},
		},
	}
	for _, user := range mirrorUsers {
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
	s.mirror = m
	took := s.mirrorCanary(t, 90*time.Second)
	t.Logf("the mirror commits the namespace's ConfigMaps (first canary after %s)", took.Round(time.Millisecond))
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

// cursorsDurable reports nil once the GitTarget's cursors are in Redis again.
func (s *soak) cursorsDurable(ctx context.Context) error {
	var gt mirrorv1alpha1.GitTarget
	if err := s.C.Client.Get(ctx, client.ObjectKey{Namespace: s.mirror.ns, Name: "main"}, &gt); err != nil {
		return err
	}
	if c := meta.FindStatusCondition(gt.Status.Conditions, mirrorv1alpha1.ConditionCursorsDurable); c == nil || c.Status != metav1.ConditionTrue {
		return fmt.Errorf("CursorsDurable %+v", c)
	}
	return nil
}

// mirrorMatchesCluster reports nil when every ConfigMap of the namespace is in git with its
// data, and git holds no other.
func (s *soak) mirrorMatchesCluster(ctx context.Context) error {
	m := s.mirror
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
	for _, user := range mirrorUsers {
		for i := range configMapsPerUser {
			file := fmt.Sprintf("%s/%s-%d.yaml", s.mirror.dir(), user, i)
			log, err := nodeenv.GitOut(s.mirror.bare, "log", "--format=%H %an", "main", "--", file)
			if err != nil {
				return a, err
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
	return a, nil
}
