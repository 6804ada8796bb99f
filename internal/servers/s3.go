package servers

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// S3Options configures an S3 server (versitygw over a posix folder).
type S3Options struct {
	// Dir holds the buckets and the log. Required.
	Dir string
	// Host to bind; default 127.0.0.1.
	Host string
	// Port to listen on; 0 picks a free one. Restarting a stopped server on its old port keeps URLs valid.
	Port int
	// AccessKey and SecretKey of the root account; defaults are generated test values.
	AccessKey, SecretKey string
}

// S3Server is a running S3-compatible server.
type S3Server struct {
	*Process
	// Endpoint is the server's base URL, http://host:port.
	Endpoint string
	// AccessKey and SecretKey of the root account.
	AccessKey, SecretKey string
	// Region the client uses; versitygw accepts any.
	Region string
}

// StartS3 starts versitygw and waits until it answers.
func StartS3(ctx context.Context, o S3Options) (*S3Server, error) {
	bin, err := LookBinary("versitygw")
	if err != nil {
		return nil, err
	}
	if o.Host, o.Port, err = loopbackOr(o.Host, o.Port); err != nil {
		return nil, err
	}
	if o.AccessKey == "" {
		o.AccessKey, o.SecretKey = "siteopsaccess", "siteopssecretkey"
	}
	addr := net.JoinHostPort(o.Host, strconv.Itoa(o.Port))
	data := filepath.Join(o.Dir, "data")
	p := newProcess("versitygw-"+strconv.Itoa(o.Port), addr, o.Dir, bin,
		"--access", o.AccessKey, "--secret", o.SecretKey, "--port", addr, "--quiet", "posix", data)
	s := &S3Server{Process: p, Endpoint: "http://" + addr, AccessKey: o.AccessKey, SecretKey: o.SecretKey, Region: "us-east-1"}
	if err := mkdir(data); err != nil {
		return nil, err
	}
	if err := p.start(ctx, 20*time.Second, func(ctx context.Context) error {
		if err := waitTCP(ctx, addr); err != nil {
			return err
		}
		_, err := s.Client(nil).ListBuckets(ctx, &s3.ListBucketsInput{})
		return err
	}); err != nil {
		return nil, err
	}
	return s, nil
}

// Restart starts the server again on the same address after Stop or Kill, keeping its data.
func (s *S3Server) Restart(ctx context.Context) error {
	return s.start(ctx, 20*time.Second, func(ctx context.Context) error {
		_, err := s.Client(nil).ListBuckets(ctx, &s3.ListBucketsInput{})
		return err
	})
}

// Client returns an S3 client for the root account with path-style addressing; httpClient may be nil.
func (s *S3Server) Client(httpClient *http.Client) *s3.Client {
	return s3.New(s3.Options{
		Region:       s.Region,
		BaseEndpoint: aws.String(s.Endpoint),
		UsePathStyle: true,
		Credentials:  credentials.NewStaticCredentialsProvider(s.AccessKey, s.SecretKey, ""),
		HTTPClient:   httpClientOrDefault(httpClient),
	})
}

// CreateBucket makes a bucket; publicRead adds a policy letting anyone GET its objects, like a CDN origin.
func (s *S3Server) CreateBucket(ctx context.Context, bucket string, publicRead bool) error {
	c := s.Client(nil)
	if _, err := c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(bucket)}); err != nil {
		return fmt.Errorf("create bucket %s: %w", bucket, err)
	}
	if !publicRead {
		return nil
	}
	policy := fmt.Sprintf(`{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":"*","Action":["s3:GetObject"],"Resource":["arn:aws:s3:::%s/*"]}]}`, bucket)
	if _, err := c.PutBucketPolicy(ctx, &s3.PutBucketPolicyInput{Bucket: aws.String(bucket), Policy: aws.String(policy)}); err != nil {
		return fmt.Errorf("make bucket %s publicly readable: %w", bucket, err)
	}
	return nil
}

func httpClientOrDefault(c *http.Client) *http.Client {
	if c != nil {
		return c
	}
	return &http.Client{Timeout: 30 * time.Second}
}
