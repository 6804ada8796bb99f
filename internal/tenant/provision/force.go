package provision

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	decov1 "github.com/siteops/siteops/api/deco/v1alpha1"
)

// ForceResync sets the sync annotation to value on the named namespaces, or on every namespace
// with deco.sites/valkey-acl=true when all is set (a label selector cannot match an annotation),
// and returns the namespaces it changed. A named namespace that does not opt in is an error, so
// a typo is not mistaken for a resync.
func ForceResync(ctx context.Context, c client.Client, all bool, names []string, value string) ([]string, error) {
	if all == (len(names) > 0) {
		return nil, errors.New("give either --all or namespace names")
	}
	var targets []corev1.Namespace
	if all {
		var list corev1.NamespaceList
		if err := c.List(ctx, &list); err != nil {
			return nil, fmt.Errorf("list namespaces: %w", err)
		}
		for _, ns := range list.Items {
			if Wanted(&ns) {
				targets = append(targets, ns)
			}
		}
	} else {
		for _, name := range names {
			var ns corev1.Namespace
			if err := c.Get(ctx, client.ObjectKey{Name: name}, &ns); err != nil {
				return nil, fmt.Errorf("read namespace %s: %w", name, err)
			}
			if !Wanted(&ns) {
				return nil, fmt.Errorf("namespace %s is not annotated %s=true (or is being deleted); nothing to resync", name, decov1.AnnotationValkeyACL)
			}
			targets = append(targets, ns)
		}
	}
	var done []string
	var errs []error
	for i := range targets {
		ns := &targets[i]
		patch := client.MergeFrom(ns.DeepCopy())
		ns.Annotations[decov1.AnnotationValkeyACLSync] = value
		if err := c.Patch(ctx, ns, patch); err != nil {
			errs = append(errs, fmt.Errorf("annotate namespace %s: %w", ns.Name, err))
			continue
		}
		done = append(done, ns.Name)
	}
	return done, errors.Join(errs...)
}

// Rotate sets the rotate annotation to value on the named namespaces, so the operator issues
// each a new password, and with revokeNow the revoke annotation too, so every earlier password
// is refused at once instead of when the workloads have rolled out. It returns the namespaces
// it changed. A namespace that does not opt in is an error, so a typo is not mistaken for a
// rotation.
func Rotate(ctx context.Context, c client.Client, names []string, value string, revokeNow bool) ([]string, error) {
	if len(names) == 0 {
		return nil, errors.New("name the namespaces to rotate")
	}
	var done []string
	var errs []error
	for _, name := range names {
		var ns corev1.Namespace
		if err := c.Get(ctx, client.ObjectKey{Name: name}, &ns); err != nil {
			errs = append(errs, fmt.Errorf("read namespace %s: %w", name, err))
			continue
		}
		if !Wanted(&ns) {
			errs = append(errs, fmt.Errorf("namespace %s is not annotated %s=true (or is being deleted); nothing to rotate", name, decov1.AnnotationValkeyACL))
			continue
		}
		patch := client.MergeFrom(ns.DeepCopy())
		ns.Annotations[decov1.AnnotationValkeyACLRotate] = value
		if revokeNow {
			ns.Annotations[AnnotationRevoke] = value
		}
		if err := c.Patch(ctx, &ns, patch); err != nil {
			errs = append(errs, fmt.Errorf("annotate namespace %s: %w", name, err))
			continue
		}
		done = append(done, name)
	}
	return done, errors.Join(errs...)
}
