package verify

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/storer"

	"github.com/siteops/siteops/internal/mirror/gitwriter"
)

// FileCommit is the last commit that changed one mirrored file, as its trailers state it.
type FileCommit struct {
	// Commit is the commit's SHA.
	Commit string
	// Subject is the first line of its message.
	Subject string
	// Author is who the commit names as the change's author.
	Author gitwriter.Signature
	// When the commit was made.
	When time.Time
	// Attribution lists the results its Attribution trailers state (exact_user, weak, absent…).
	Attribution []string
}

// LastChange finds the last commit on branch (its remote-tracking copy first, so a clone that
// was fetched but not pulled answers for the remote) that changed path. found is false when no
// commit on the branch touched it.
func LastChange(repo *git.Repository, branch, path string) (fc FileCommit, found bool, err error) {
	tip, err := resolveRef(repo, "origin/"+branch)
	if err != nil {
		if tip, err = resolveRef(repo, branch); err != nil {
			return FileCommit{}, false, err
		}
	}
	iter, err := repo.Log(&git.LogOptions{From: tip, FileName: &path})
	if err != nil {
		return FileCommit{}, false, fmt.Errorf("read the history of %s: %w", path, err)
	}
	defer iter.Close()
	err = iter.ForEach(func(c *object.Commit) error {
		subject, _, _ := strings.Cut(c.Message, "\n")
		fc = FileCommit{Commit: c.Hash.String(), Subject: subject, When: c.Author.When,
			Author:      gitwriter.Signature{Name: c.Author.Name, Email: c.Author.Email},
			Attribution: Trailers(c.Message)[TrailerAttribution]}
		found = true
		return storer.ErrStop
	})
	if err != nil && !errors.Is(err, storer.ErrStop) {
		return FileCommit{}, false, fmt.Errorf("read the history of %s: %w", path, err)
	}
	return fc, found, nil
}
