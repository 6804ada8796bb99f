package e2e

import (
	corev1 "k8s.io/api/core/v1"

	"github.com/siteops/siteops/test/internal/nodeenv"
)

// env is what the steps share: the node environment, and what earlier steps created.
type env struct {
	*nodeenv.Env

	site     *nodeenv.SiteRepo
	siteNS   string
	sitePods []corev1.Pod
	// mirrorNS holds the GitTarget "main" of step 7, which mirrors its ConfigMaps to the bare
	// repository mirrorRepo.
	mirrorNS, mirrorRepo string
}
