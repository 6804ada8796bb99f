package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	decov1 "github.com/siteops/siteops/api/deco/v1alpha1"
	"github.com/siteops/siteops/internal/decofile/source"
)

// fetch retrieves the blocks. For github and git sources it first resolves the ref; when the
// resolved commit is the one already stored for this generation and the ConfigMap is intact it
// returns cached=true without downloading anything (seed flow 2: the SHA is the cache key).
func (r *Reconciler) fetch(ctx context.Context, df *decov1.Decofile, intact bool) (blocks source.Blocks, commit string, cached bool, err error) {
	ctx = source.WithTenant(ctx, df.Namespace) // one tenant's slow remotes hold few slots of a shared host
	upToDate := func(sha string) bool {
		return intact && sha == df.Status.GitHubCommit && df.Status.ObservedGeneration == df.Generation &&
			meta.IsStatusConditionTrue(df.Status.Conditions, decov1.ConditionReady)
	}
	switch df.Spec.Source {
	case decov1.SourceInline:
		if df.Spec.Inline == nil {
			return nil, "", false, &source.Error{Reason: source.ReasonInvalidContent, Err: errors.New("spec.source is inline but spec.inline is not set")}
		}
		values := make(map[string]json.RawMessage, len(df.Spec.Inline.Value))
		for k, v := range df.Spec.Inline.Value {
			values[k] = v.Raw
		}
		blocks, err = source.Inline(values)
		return blocks, "", false, err
	case decov1.SourceGitHub:
		gh := df.Spec.GitHub
		if gh == nil {
			return nil, "", false, &source.Error{Reason: source.ReasonInvalidContent, Err: errors.New("spec.source is github but spec.github is not set")}
		}
		own, err := r.secretValue(ctx, df.Namespace, gh.Secret, "token", "spec.github.secret")
		if err != nil {
			return nil, "", false, err
		}
		token, _, err := r.opts.Tokens.Choose(ctx, df.Namespace, gh.Org, gh.Repo, own)
		if err != nil {
			return nil, "", false, err
		}
		sha, err := r.opts.GitHub.Resolve(ctx, gh.Org, gh.Repo, gh.Commit, token)
		if err != nil {
			return nil, "", false, err
		}
		return r.fetchCommit(df, sha, upToDate, func() (source.Blocks, error) {
			return r.opts.GitHub.Fetch(ctx, gh.Org, gh.Repo, sha, gh.Path, token)
		})
	case decov1.SourceGit:
		g := df.Spec.Git
		if g == nil {
			return nil, "", false, &source.Error{Reason: source.ReasonInvalidContent, Err: errors.New("spec.source is git but spec.git is not set")}
		}
		auth, err := r.gitAuth(ctx, df)
		if err != nil {
			return nil, "", false, err
		}
		ref := g.Ref
		if ref == "" {
			ref = "main"
		}
		sha, err := r.opts.Git.Resolve(ctx, g.URL, ref, auth)
		if err != nil {
			return nil, "", false, err
		}
		return r.fetchCommit(df, sha, upToDate, func() (source.Blocks, error) {
			return r.opts.Git.Fetch(ctx, g.URL, ref, sha, g.Path, auth)
		})
	}
	return nil, "", false, &source.Error{Reason: source.ReasonInvalidContent, Err: fmt.Errorf("unknown spec.source %q", df.Spec.Source)}
}

// fetchCommit ends a github or git retrieval once the ref resolved to sha: nothing is downloaded
// when that commit is stored already (cached) or was rejected or rolled back.
func (r *Reconciler) fetchCommit(df *decov1.Decofile, sha string, upToDate func(string) bool, download func() (source.Blocks, error)) (blocks source.Blocks, commit string, cached bool, err error) {
	if upToDate(sha) {
		return nil, sha, true, nil
	}
	if r.isRejected(df, sha) || rolledBack(df, "", sha) {
		return nil, sha, false, errRejected
	}
	blocks, err = download()
	return blocks, sha, false, err
}

func (r *Reconciler) isRejected(df *decov1.Decofile, sha string) bool {
	v, ok := r.rejected.Load(types.NamespacedName{Namespace: df.Namespace, Name: df.Name})
	return ok && v.(rejectedCommit) == rejectedCommit{generation: df.Generation, sha: sha}
}

// secretValue reads key of Secret name; "" name means no Secret.
func (r *Reconciler) secretValue(ctx context.Context, ns, name, key, field string) (string, error) {
	if name == "" {
		return "", nil
	}
	s, err := r.secret(ctx, ns, name, field)
	if err != nil {
		return "", err
	}
	v := strings.TrimSpace(string(s.Data[key]))
	if v == "" {
		return "", &source.Error{Reason: source.ReasonCredentials, Err: fmt.Errorf("secret %s named by %s has no %q key", name, field, key)}
	}
	return v, nil
}

func (r *Reconciler) secret(ctx context.Context, ns, name, field string) (*corev1.Secret, error) {
	var s corev1.Secret
	if err := r.reader.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &s); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, &source.Error{Reason: source.ReasonCredentials, Err: fmt.Errorf("secret %s named by %s does not exist in namespace %s", name, field, ns)}
		}
		return nil, &source.Error{Reason: source.ReasonUnavailable, Transient: true, Err: fmt.Errorf("read Secret %s: %w", name, err)}
	}
	return &s, nil
}

func (r *Reconciler) gitAuth(ctx context.Context, df *decov1.Decofile) (*source.GitAuth, error) {
	ref := df.Spec.Git.SecretRef
	if ref == nil || ref.Name == "" {
		return nil, nil
	}
	s, err := r.secret(ctx, df.Namespace, ref.Name, "spec.git.secretRef")
	if err != nil {
		return nil, err
	}
	a := &source.GitAuth{
		Username:    string(s.Data["username"]),
		Password:    string(s.Data["password"]),
		BearerToken: string(s.Data["bearerToken"]),
		Identity:    s.Data["identity"],
		KnownHosts:  s.Data["known_hosts"],
	}
	if a.Username == "" && a.Password == "" && a.BearerToken == "" && len(a.Identity) == 0 {
		return nil, &source.Error{Reason: source.ReasonCredentials, Err: fmt.Errorf("secret %s named by spec.git.secretRef has none of username/password, bearerToken or identity", ref.Name)}
	}
	return a, nil
}
