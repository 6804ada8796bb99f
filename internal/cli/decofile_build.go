package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	decov1 "github.com/siteops/siteops/api/deco/v1alpha1"
	"github.com/siteops/siteops/internal/decofile/encode"
	"github.com/siteops/siteops/internal/decofile/source"
)

type decofileBuildOptions struct {
	dir, zip, path  string
	name, namespace string
	threshold       int
	output          string
	limits          source.Limits
}

func newDecofileBuildCommand() *cobra.Command {
	o := decofileBuildOptions{name: "site", threshold: encode.DefaultThreshold, output: "summary", limits: source.DefaultLimits}
	cmd := &cobra.Command{
		Use:   "build (--dir DIR | --zip FILE) [--path P] [--compression-threshold N] [-o yaml|json|summary]",
		Short: "Extract and encode a Decofile offline and print the ConfigMap it would become",
		Long: `Runs the operator's extraction and encoding on a checkout or a ZIP archive (such as a
GitHub archive) and prints the ConfigMap the operator would write, or a size summary.
Use it to check that a site's blocks are valid, do not collide and fit in a ConfigMap.`,
		Example: `  siteops decofile build --dir . --path .deco/blocks
  siteops decofile build --zip site.zip --path .deco/blocks -o yaml --name my-site`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return o.run(cmd.OutOrStdout()) },
	}
	f := cmd.Flags()
	f.StringVar(&o.dir, "dir", "", "folder holding the repository (a checkout)")
	f.StringVar(&o.zip, "zip", "", "ZIP archive of the repository; a single top folder (as in GitHub archives) is skipped")
	f.StringVar(&o.path, "path", "", "folder of the repository holding the block files, e.g. .deco/blocks")
	f.IntVar(&o.threshold, "compression-threshold", o.threshold, "merged-JSON size in bytes above which the content is brotli-compressed (the manager's flag of that name)")
	f.StringVarP(&o.output, "output", "o", o.output, "yaml, json or summary")
	f.StringVar(&o.name, "name", o.name, "Decofile name (the ConfigMap is decofile-<name>)")
	f.StringVarP(&o.namespace, "namespace", "n", "", "namespace put on the printed ConfigMap")
	// The limits carry the manager's flag names, so a value can be copied from its settings.
	f.Int64Var(&o.limits.DecompressedBytes, "decofile-max-content-bytes", o.limits.DecompressedBytes, "most block-file bytes read")
	f.IntVar(&o.limits.Files, "decofile-max-files", o.limits.Files, "most block files read")
	f.Int64Var(&o.limits.ArchiveBytes, "decofile-max-archive-bytes", o.limits.ArchiveBytes, "largest ZIP archive accepted")
	for old, name := range map[string]string{"threshold": "compression-threshold", "max-content-bytes": "decofile-max-content-bytes",
		"max-files": "decofile-max-files", "max-archive-bytes": "decofile-max-archive-bytes"} {
		alias := *f.Lookup(name)
		alias.Name, alias.Shorthand = old, ""
		f.AddFlag(&alias)
		_ = f.MarkDeprecated(old, "use --"+name)
	}
	cmd.MarkFlagsMutuallyExclusive("dir", "zip")
	cmd.MarkFlagsOneRequired("dir", "zip")
	return cmd
}

func (o *decofileBuildOptions) run(w io.Writer) error {
	switch o.output {
	case "yaml", "json", "summary":
	default:
		return fmt.Errorf("--output %q: want yaml, json or summary", o.output)
	}
	start := time.Now()
	blocks, err := o.extract()
	if err != nil {
		return err
	}
	merged, err := encode.Merge(blocks)
	if err != nil {
		return fmt.Errorf("merge blocks: %w", err)
	}
	res, encErr := encode.Encode(merged, encode.Options{Threshold: o.threshold})
	elapsed := time.Since(start)
	var tooLarge *encode.TooLargeError
	if errors.As(encErr, &tooLarge) && o.output == "summary" {
		_, _ = fmt.Fprintf(w, "blocks:       %d\nraw bytes:    %d\nstored bytes: %d (smallest reached)\nfits:         no — %v\nencode time:  %s\n",
			len(blocks), len(merged), tooLarge.StoredBytes, encErr, elapsed.Round(time.Millisecond))
		return encErr
	}
	if encErr != nil {
		return encErr
	}
	if o.output == "summary" {
		level := "-"
		if res.Format == decov1.FormatBin {
			level = fmt.Sprintf("brotli %s (%d attempt(s))", res.Level, res.Attempts)
		}
		_, err := fmt.Fprintf(w, "blocks:       %d\nraw bytes:    %d\nstored bytes: %d\nformat:       %s (%s)\nratio:        %.1f%%\ncompression:  %s\ncontent hash: %s\nencode time:  %s\n",
			len(blocks), len(merged), res.StoredBytes(), res.Format, res.Key,
			100*float64(res.StoredBytes())/float64(max(len(merged), 1)), level, encode.Hash(merged), elapsed.Round(time.Millisecond))
		return err
	}
	cm := corev1.ConfigMap{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{
			Name: "decofile-" + o.name, Namespace: o.namespace,
			Labels:      map[string]string{decov1.LabelManagedBy: decov1.ManagedByValue, decov1.LabelDecofile: o.name},
			Annotations: map[string]string{"deco.sites/content-hash": encode.Hash(merged)},
		},
		Data: map[string]string{res.Key: res.Data, decov1.KeyTimestamp: strconv.FormatInt(time.Now().Unix(), 10)},
	}
	var out []byte
	if o.output == "json" {
		out, err = json.MarshalIndent(cm, "", "  ")
		out = append(out, '\n')
	} else {
		out, err = yaml.Marshal(cm)
	}
	if err != nil {
		return fmt.Errorf("print ConfigMap: %w", err)
	}
	_, err = w.Write(out)
	return err
}

func (o *decofileBuildOptions) extract() (source.Blocks, error) {
	if o.dir != "" {
		return source.ExtractFS(os.DirFS(o.dir), o.path, o.limits)
	}
	f, err := os.Open(o.zip)
	if err != nil {
		return nil, fmt.Errorf("open --zip: %w", err)
	}
	defer func() { _ = f.Close() }()
	info, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("stat --zip: %w", err)
	}
	strip := false
	if top := source.SingleTopDir(f, info.Size()); top != "" {
		p := source.CleanPath(o.path)
		strip = p != top && !strings.HasPrefix(p, top+"/")
	}
	blocks, err := source.ExtractZip(f, info.Size(), o.path, source.ZipOptions{StripTopDir: strip}, o.limits)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Base(o.zip), err)
	}
	return blocks, nil
}
