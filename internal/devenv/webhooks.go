package devenv

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/siteops/siteops/internal/decofile/inject"
	"github.com/siteops/siteops/internal/manager"
	"github.com/siteops/siteops/internal/mirror/commitrequest"
	"github.com/siteops/siteops/internal/servers"
)

// injectionWanted reports whether the manager serves the Decofile admission webhooks.
func injectionWanted(mo *manager.Options) bool {
	return mo.Enabled(manager.PartDecofile) && !mo.Decofile.DisableInjection
}

// webhooksWanted reports whether the manager serves admission webhooks the local API server
// calls: the Decofile ones or the mirror's CommitRequest webhook.
func webhooksWanted(mo *manager.Options) bool {
	return injectionWanted(mo) || commitRequestWebhookServed(mo)
}

// installWebhooks points the manager's webhook server at a loopback port with a self-signed
// certificate and registers the webhook configurations with the local API server, which calls
// the webhooks by URL. The manager fills their caBundle when it starts (--webhook-self-signed).
func installWebhooks(ctx context.Context, c client.Client, stateDir string, mo *manager.Options) error {
	port, err := servers.FreePort("127.0.0.1")
	if err != nil {
		return err
	}
	mo.WebhookHost = "127.0.0.1"
	mo.WebhookPort = port
	mo.WebhookCertDir = filepath.Join(stateDir, "webhook-certs")
	mo.WebhookSelfSigned = true
	mo.WebhookCertHosts = []string{"127.0.0.1"}

	base := "https://127.0.0.1:" + strconv.Itoa(port)
	var configs []client.Object
	if injectionWanted(mo) {
		mwc, vwc := inject.WebhookConfigurations(inject.URLClientConfig(base, nil))
		configs = append(configs, mwc, vwc)
	}
	if commitRequestWebhookServed(mo) {
		configs = append(configs, commitrequest.WebhookConfiguration(commitrequest.URLClientConfig(base, nil)))
	}
	for _, obj := range configs {
		if err := c.Create(ctx, obj); apierrors.IsAlreadyExists(err) {
			existing := obj.DeepCopyObject().(client.Object)
			if err := c.Get(ctx, client.ObjectKeyFromObject(obj), existing); err != nil {
				return fmt.Errorf("register webhook %s: %w", obj.GetName(), err)
			}
			obj.SetResourceVersion(existing.GetResourceVersion())
			err = c.Update(ctx, obj)
			if err != nil {
				return fmt.Errorf("register webhook %s: %w", obj.GetName(), err)
			}
		} else if err != nil {
			return fmt.Errorf("register webhook %s: %w", obj.GetName(), err)
		}
	}
	return nil
}

// waitForWebhookServer waits until the manager's webhook server accepts TLS connections, so
// "ready" means annotated workloads are injected.
func waitForWebhookServer(ctx context.Context, mgr ctrl.Manager) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	check := mgr.GetWebhookServer().StartedChecker()
	for {
		err := check(nil)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("webhook server not serving: %w", err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}
