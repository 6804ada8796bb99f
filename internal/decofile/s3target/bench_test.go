package s3target_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	decov1 "github.com/siteops/siteops/api/deco/v1alpha1"
	"github.com/siteops/siteops/internal/decofile/encode"
	"github.com/siteops/siteops/internal/decofile/s3target"
	"github.com/siteops/siteops/internal/testenv"
)

// BenchmarkUploadAndLoad measures one upload of a merged Decofile to versitygw on loopback and
// one read-back by the rollout loader, for a small site and for a content-heavy one.
func BenchmarkUploadAndLoad(b *testing.B) {
	srv := testenv.S3(b, false, bucket)
	setCredentials(b, srv.AccessKey, srv.SecretKey)
	store, err := s3target.New(context.Background(), s3target.Config{Bucket: bucket, Region: srv.Region, Endpoint: srv.Endpoint, PathStyle: true})
	if err != nil {
		b.Fatal(err)
	}
	for _, size := range []int{64 << 10, 4 << 20} {
		body := []byte(`{"html":"` + strings.Repeat("deco ", size/5) + `"}`)
		hash := encode.Hash(body)
		df := &decov1.Decofile{ObjectMeta: metav1.ObjectMeta{Namespace: "bench", Name: fmt.Sprintf("site-%d", size)}}
		df.Status.ContentHash, df.Status.Timestamp, df.Status.S3URL = hash, 1, "set"
		b.Run(fmt.Sprintf("put/%dKiB", size>>10), func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				if err := store.Put(context.Background(), df, body, hash, 1); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("load/%dKiB", size>>10), func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			l := s3target.Loader{Store: store}
			for b.Loop() {
				if c, err := l.Load(context.Background(), df, int64(len(body))); err != nil || len(c.JSON) != len(body) {
					b.Fatalf("%d bytes, %v", len(c.JSON), err)
				}
			}
		})
	}
}
