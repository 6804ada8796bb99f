package s3target

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"

	decov1 "github.com/siteops/siteops/api/deco/v1alpha1"
	"github.com/siteops/siteops/internal/decofile/inject"
	"github.com/siteops/siteops/internal/decofile/source"
)

// Condition reasons for S3 failures. Every one is retried with backoff: a bucket, a policy or an
// endpoint can be fixed outside the cluster without any change the controller would see.
const (
	// ReasonUnavailable: the endpoint could not be reached or answered with a server error.
	ReasonUnavailable = "S3Unavailable"
	// ReasonAccessDenied: the credentials were refused (403, unknown key, bad signature).
	ReasonAccessDenied = "S3AccessDenied"
	// ReasonBucketNotFound: the bucket does not exist.
	ReasonBucketNotFound = "S3BucketNotFound"
	// ReasonUploadFailed: any other refusal of the request.
	ReasonUploadFailed = "S3UploadFailed"
)

// Object metadata written with every upload, so the stored version can be told without
// downloading it.
const (
	MetaContentHash = "siteops-content-hash"
	MetaTimestamp   = "siteops-timestamp"
)

// requestTimeout bounds one S3 call (with the SDK's own retries), so an unreachable endpoint
// fails the reconcile instead of holding a worker.
const requestTimeout = 30 * time.Second

// Store reads and writes Decofile objects in the configured bucket.
type Store struct {
	client  *s3.Client
	bucket  string
	prefix  string
	webhook inject.S3Config
}

// New builds a Store for c with credentials from the standard AWS chain (environment, shared
// config and credentials files, web identity / IRSA, container and instance roles).
func New(ctx context.Context, c Config) (*Store, error) {
	if !c.Enabled() {
		return nil, errors.New("the s3 target is not configured: set --s3-bucket")
	}
	opts := []func(*config.LoadOptions) error{
		// Two attempts per call: the reconcile's own backoff does the long-term retrying.
		config.WithRetryer(func() aws.Retryer {
			return retry.NewStandard(func(o *retry.StandardOptions) { o.MaxAttempts = 2; o.MaxBackoff = time.Second })
		}),
	}
	if c.Region != "" {
		opts = append(opts, config.WithRegion(c.Region))
	}
	if c.HTTPClient != nil {
		opts = append(opts, config.WithHTTPClient(c.HTTPClient))
	}
	cfg, err := config.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("load AWS configuration for the s3 target: %w", err)
	}
	if cfg.Region == "" {
		cfg.Region = defaultRegion
	}
	client := s3.NewFromConfig(cfg, func(o *s3.Options) {
		if c.Endpoint != "" {
			o.BaseEndpoint = aws.String(c.Endpoint)
		}
		o.UsePathStyle = c.PathStyle
	})
	return &Store{client: client, bucket: c.Bucket, prefix: c.Prefix, webhook: c.Webhook(cfg.Region)}, nil
}

// Webhook is what the injection webhook needs to build DECO_RELEASE for this store.
func (s *Store) Webhook() inject.S3Config { return s.webhook }

// Key is the object key of df, the same one the webhook's URL names.
func (s *Store) Key(df *decov1.Decofile) string { return df.S3ObjectKey(s.prefix) }

// URL is the public https URL pods load df's object from (DECO_RELEASE).
func (s *Store) URL(df *decov1.Decofile) string { return s.webhook.ObjectURL(df) }

// Describe names df's object as s3://bucket/key, for messages.
func (s *Store) Describe(df *decov1.Decofile) string { return s.describeKey(s.Key(df)) }

// describeKey names the object at key as s3://bucket/key.
func (s *Store) describeKey(key string) string { return "s3://" + s.bucket + "/" + key }

// LastGoodSuffix ends the key of the copy of the last content every pod confirmed under
// spec.rollout (see LastGoodKey).
const LastGoodSuffix = ".last-good"

// LastGoodKey is the object key of df's last good copy: its own key with LastGoodSuffix, so it
// sits beside the object and no other Decofile's key (which ends in decofile.json) is ever it.
func (s *Store) LastGoodKey(df *decov1.Decofile) string { return s.Key(df) + LastGoodSuffix }

// LoadLastGood reads df's last good copy (LastGoodKey), at most limit bytes.
func (s *Store) LoadLastGood(ctx context.Context, df *decov1.Decofile, limit int64) ([]byte, error) {
	obj, err := s.get(ctx, df, s.LastGoodKey(df), limit)
	if err != nil {
		return nil, err
	}
	return obj.JSON, nil
}

// Put uploads the merged JSON of df, uncompressed: the runtime's HTTP loader does
// fetch → JSON.parse and decodes nothing. no-cache makes a CDN revalidate on every cold start.
func (s *Store) Put(ctx context.Context, df *decov1.Decofile, body []byte, hash string, ts int64) error {
	return s.put(ctx, df, s.Key(df), body, hash, ts)
}

func (s *Store) put(ctx context.Context, df *decov1.Decofile, key string, body []byte, hash string, ts int64) error {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	_, err := s.client.PutObject(ctx, &s3.PutObjectInput{
		Bucket:        aws.String(s.bucket),
		Key:           aws.String(key),
		Body:          bytes.NewReader(body),
		ContentLength: aws.Int64(int64(len(body))),
		ContentType:   aws.String("application/json"),
		CacheControl:  aws.String("no-cache"),
		Metadata:      map[string]string{MetaContentHash: hash, MetaTimestamp: strconv.FormatInt(ts, 10)},
	})
	if err != nil {
		return s.classify("upload", df, err)
	}
	return nil
}

// Object is a stored Decofile read back.
type Object struct {
	// JSON is the object's body.
	JSON []byte
	// Timestamp is the version it was uploaded with (0 when the metadata is missing).
	Timestamp int64
}

// ErrNotFound says the object does not exist.
var ErrNotFound = errors.New("object not found")

// Get downloads df's object, reading at most limit bytes.
func (s *Store) Get(ctx context.Context, df *decov1.Decofile, limit int64) (*Object, error) {
	return s.get(ctx, df, s.Key(df), limit)
}

func (s *Store) get(ctx context.Context, df *decov1.Decofile, key string, limit int64) (*Object, error) {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	out, err := s.client.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(s.bucket), Key: aws.String(key)})
	if err != nil {
		var nsk *types.NoSuchKey
		if errors.As(err, &nsk) {
			return nil, fmt.Errorf("%s: %w", s.describeKey(key), ErrNotFound)
		}
		return nil, s.classify("download", df, err)
	}
	defer out.Body.Close()
	name := s.describeKey(key)
	var buf bytes.Buffer
	if n := aws.ToInt64(out.ContentLength); n > 0 && n <= limit {
		buf.Grow(int(n) + bytes.MinRead) // one allocation for the whole body
	}
	_, err = buf.ReadFrom(io.LimitReader(out.Body, limit+1))
	data := buf.Bytes()
	if err != nil {
		return nil, &source.Error{Reason: ReasonUnavailable, Transient: true, Err: fmt.Errorf("read %s: %w", name, err)}
	}
	if int64(len(data)) > limit {
		return nil, &source.Error{Reason: ReasonUploadFailed, Transient: true, Err: fmt.Errorf("%s is larger than %d bytes", name, limit)}
	}
	ts, _ := strconv.ParseInt(out.Metadata[MetaTimestamp], 10, 64)
	return &Object{JSON: data, Timestamp: ts}, nil
}

// Delete removes df's object and its last good copy; a missing object is not an error.
func (s *Store) Delete(ctx context.Context, df *decov1.Decofile) error {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	for _, key := range []string{s.LastGoodKey(df), s.Key(df)} {
		if _, err := s.client.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(s.bucket), Key: aws.String(key)}); err != nil {
			var nsk *types.NoSuchKey
			if errors.As(err, &nsk) {
				continue
			}
			return s.classify("delete", df, err)
		}
	}
	return nil
}

// classify turns an SDK error into a *source.Error whose reason says what to fix.
func (s *Store) classify(op string, df *decov1.Decofile, err error) error {
	reason, hint := Reason(err)
	return &source.Error{Reason: reason, Transient: true, Err: fmt.Errorf("%s %s: %w%s", op, s.Describe(df), err, hint)}
}

// Reason maps an S3 error to a condition reason and a hint for the user.
func Reason(err error) (reason, hint string) {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		switch ae.ErrorCode() {
		case "NoSuchBucket":
			return ReasonBucketNotFound, "; create the bucket or fix --s3-bucket"
		case "AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "AllAccessDisabled", "ExpiredToken", "InvalidToken":
			return ReasonAccessDenied, "; grant the operator's credentials s3:PutObject, s3:GetObject and s3:DeleteObject on the bucket"
		}
	}
	var re *awshttp.ResponseError
	if errors.As(err, &re) {
		switch code := re.HTTPStatusCode(); {
		case code == 0: // the request was never answered
			return ReasonUnavailable, "; check --s3-endpoint and the network path to it"
		case code == http.StatusForbidden || code == http.StatusUnauthorized:
			return ReasonAccessDenied, "; grant the operator's credentials s3:PutObject, s3:GetObject and s3:DeleteObject on the bucket"
		case code == http.StatusNotFound:
			return ReasonBucketNotFound, "; create the bucket or fix --s3-bucket"
		case code >= 500:
			return ReasonUnavailable, ""
		default:
			return ReasonUploadFailed, ""
		}
	}
	// No HTTP response at all: connection refused, DNS, TLS, timeout.
	return ReasonUnavailable, "; check --s3-endpoint and the network path to it"
}
