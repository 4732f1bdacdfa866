#!/usr/bin/env bash
# Commit messages follow the Go convention: "pkg: what changed" in at most
# 72 characters, then a blank line and a body. This fails on any commit
# after BASE (the last commit before the convention was enforced) whose
# subject is longer, or whose second line is not blank.
set -euo pipefail
cd "$(dirname "$0")/.."
BASE=9fefcf578bd3ce6315f3063c02fdd8f91a0a572e
if ! git cat-file -e "$BASE^{commit}" 2>/dev/null; then
  if [ "$(git rev-parse --is-shallow-repository)" = true ]; then
    echo "commit-subjects: a shallow clone without $BASE: not checked"; exit 0
  fi
  echo "commit-subjects: $BASE is not in the history"; exit 1
fi
bad=0
while IFS= read -r c; do
  subject=$(git log -1 --format=%s "$c")
  second=$(git log -1 --format=%B "$c" | sed -n 2p)
  if [ ${#subject} -gt 72 ]; then
    echo "commit $c: subject of ${#subject} characters (at most 72): $subject"; bad=1
  fi
  if [ -n "$second" ]; then
    echo "commit $c: the line after the subject is not blank"; bad=1
  fi
done < <(git rev-list "$BASE..HEAD")
exit $bad
