package soak

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	decov1alpha1 "github.com/siteops/siteops/api/deco/v1alpha1"
	"github.com/siteops/siteops/internal/testenv"
	"github.com/siteops/siteops/test/internal/nodeenv"
)

// probePort is where the cache probe pods serve their counts.
const probePort = 8080

// tenant is one site namespace: its repository, its Decofile "site", a Deployment "site" of two
// injected site pods, and a cache probe pod using the tenant's Valkey user all the time.
type tenant struct {
	name, ns string
	repo     *nodeenv.SiteRepo
	user     string // the tenant's Valkey username
	// progressive tenants roll out one pod first (spec.rollout) and now and then publish
	// content the site runtime refuses to load, which must be rolled back after that step.
	progressive bool
	// large tenants' sites hold catalog blocks past the compression threshold: stored as
	// decofile.bin.
	large bool
	// s3 tenants' sites are stored as S3 objects (spec.target: s3) that their pods load from
	// the CDN.
	s3 bool

	mu sync.Mutex // one git work tree: pushes one at a time
	// pushed are the commits pushed, oldest first; titles[i] is what pushed[i] says; bad[i]
	// says it was a bad publish; pushedAt[i] is when it was pushed.
	pushed, titles []string
	bad            []bool
	pushedAt       []time.Time
	pushFailures   int
}

// title is what edition n of the tenant's site says: the tenant's name is in it, so a pod
// serving another tenant's content is seen.
func (tn *tenant) title(n int) string { return fmt.Sprintf("%s edition %d", tn.name, n) }

// push commits the next edition and pushes it; a push the remote refuses is counted, not
// retried (the next one carries the content forward).
func (tn *tenant) push() (index int, err error) { return tn.pushEdition(false) }

// pushBad publishes an edition the site runtime refuses to load: a block whose module is
// empty.
func (tn *tenant) pushBad() (index int, err error) { return tn.pushEdition(true) }

func (tn *tenant) pushEdition(bad bool) (index int, err error) {
	tn.mu.Lock()
	defer tn.mu.Unlock()
	title := tn.title(len(tn.pushed) + tn.pushFailures)
	module := "site"
	if bad {
		module = ""
	}
	sha, err := commitAndPush(tn.repo, "edition", map[string]string{
		"blocks/site.json": fmt.Sprintf(`{"__resolveType": %q, "title": %q}`, module, title),
	})
	if err != nil {
		tn.pushFailures++
		return -1, err
	}
	tn.pushed = append(tn.pushed, sha)
	tn.titles = append(tn.titles, title)
	tn.bad = append(tn.bad, bad)
	tn.pushedAt = append(tn.pushedAt, time.Now())
	return len(tn.pushed) - 1, nil
}

// last is the last good pushed commit and its title: what the tenant's site must end at.
func (tn *tenant) last() (sha, title string) {
	tn.mu.Lock()
	defer tn.mu.Unlock()
	for i := len(tn.pushed) - 1; i >= 0; i-- {
		if !tn.bad[i] {
			return tn.pushed[i], tn.titles[i]
		}
	}
	return "", ""
}

// lastIsBad says whether the last push was a bad publish.
func (tn *tenant) lastIsBad() bool {
	tn.mu.Lock()
	defer tn.mu.Unlock()
	return len(tn.bad) > 0 && tn.bad[len(tn.bad)-1]
}

// badStood counts the bad publishes that stayed the newest push for at least d before the next
// push or until: ones replaced sooner may be superseded before their first step is judged.
func (tn *tenant) badStood(d time.Duration, until time.Time) int {
	tn.mu.Lock()
	defer tn.mu.Unlock()
	n := 0
	for i, bad := range tn.bad {
		next := until
		if i+1 < len(tn.pushedAt) {
			next = tn.pushedAt[i+1]
		}
		if bad && next.Sub(tn.pushedAt[i]) >= d {
			n++
		}
	}
	return n
}

// isBad says whether sha was pushed as a bad publish.
func (tn *tenant) isBad(sha string) bool {
	tn.mu.Lock()
	defer tn.mu.Unlock()
	i := slices.Index(tn.pushed, sha)
	return i >= 0 && tn.bad[i]
}

// pushedIndex is the position of sha among the pushed commits, or -1.
func (tn *tenant) pushedIndex(sha string) int {
	tn.mu.Lock()
	defer tn.mu.Unlock()
	return slices.Index(tn.pushed, sha)
}

// setupTenants creates n tenants and waits until every one serves its first edition on its
// site pods and its probe answers.
func (s *soak) setupTenants(t *testing.T, n int) {
	ctx := context.Background()
	for i := range n {
		tn := &tenant{name: fmt.Sprintf("tenant-%02d", i), progressive: i%4 == 1, large: i%4 == 2, s3: i%4 == 3}
		tn.ns = s.Namespace(t, "soak-"+tn.name, map[string]string{decov1alpha1.AnnotationValkeyACL: "true"})
		tn.repo = s.NewSiteRepo(t, tn.name)
		if tn.large {
			files := map[string]string{}
			for name, b := range nodeenv.LargeBlocks(2 * nodeenv.CompressionThreshold) {
				files["blocks/"+name+".json"] = string(b)
			}
			_, err := commitAndPush(tn.repo, "catalog", files)
			nodeenv.Must(t, err, "push the catalog of %s", tn.name)
		}
		if _, err := tn.push(); err != nil {
			t.Fatalf("first push of %s: %v", tn.name, err)
		}
		df := &decov1alpha1.Decofile{
			ObjectMeta: metav1.ObjectMeta{Name: "site", Namespace: tn.ns},
			Spec: decov1alpha1.DecofileSpec{Source: decov1alpha1.SourceGit,
				Git:      &decov1alpha1.GitSource{URL: tn.repo.URL, Ref: "main", Path: "blocks"},
				Interval: &metav1.Duration{Duration: 10 * time.Second}},
		}
		if tn.s3 {
			df.Spec.Target = decov1alpha1.TargetS3
		}
		if tn.progressive {
			df.Spec.Rollout = &decov1alpha1.RolloutSpec{Steps: []intstr.IntOrString{intstr.FromInt32(1)}, Pause: &metav1.Duration{Duration: 2 * time.Second}}
		}
		nodeenv.Must(t, s.C.Client.Create(ctx, df), "create Decofile of %s", tn.name)
		s.tenants = append(s.tenants, tn)
	}
	for _, tn := range s.tenants {
		var secret corev1.Secret
		nodeenv.WaitFor(t, 90*time.Second, "the valkey-acl Secret of "+tn.name, func(ctx context.Context) error {
			return s.C.Client.Get(ctx, client.ObjectKey{Namespace: tn.ns, Name: decov1alpha1.ValkeyACLSecretName}, &secret)
		})
		tn.user = string(secret.Data[decov1alpha1.ValkeyACLUsernameKey])
		sha, _ := tn.last()
		s.WaitDecofile(t, tn.ns, "site", sha, false)
		site := s.SiteDeployment(tn.ns, "site", "site", 2)
		if tn.s3 {
			nodeenv.Must(t, s.S3.TrustCDN(ctx, s.C.Client, site), "trust the CDN in %s", tn.name)
		}
		nodeenv.Must(t, s.C.Client.Create(ctx, site), "create the site Deployment of %s", tn.name)
	}
	for i, tn := range s.tenants {
		// Each probe tries the next tenant's key: a read that is not refused is a break.
		other := s.tenants[(i+1)%len(s.tenants)].user + ":soak"
		nodeenv.Must(t, s.C.Client.Create(ctx, s.probeDeployment(tn.ns, other)), "create the cache probe of %s", tn.name)
	}
	for _, tn := range s.tenants {
		s.ReadyPods(t, tn.ns, "site", 2)
		s.ReadyPods(t, tn.ns, "cacheprobe", 1)
	}
}

// probeDeployment is the cache probe, using the tenant's Valkey user through the Sentinels every
// 200 ms and trying other, another tenant's key, and serving its counts.
func (s *soak) probeDeployment(ns, other string) *appsv1.Deployment {
	d := s.ProbeDeployment(ns, "--listen", fmt.Sprintf("0.0.0.0:%d", probePort),
		"--sentinels", strings.Join(s.ValkeySet.SentinelAddrs(), ","), "--master", s.ValkeySet.MasterName,
		"--other-key", other)
	d.Spec.Template.Spec.Containers[0].ReadinessProbe = &corev1.Probe{
		ProbeHandler:  corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(probePort)}},
		PeriodSeconds: 1,
	}
	return d
}

// commitAndPush commits files in the repository's work tree and pushes main; a refused push
// leaves the commit to go with the next one.
func commitAndPush(r *nodeenv.SiteRepo, msg string, files map[string]string) (string, error) {
	sha, err := testenv.WriteCommit(r.Dir, msg, files)
	if err != nil {
		return "", err
	}
	if _, err := testenv.RunGit(r.Dir, "push", "-q", "origin", "HEAD:main"); err != nil {
		return "", err
	}
	return sha, nil
}
