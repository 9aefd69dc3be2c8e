#!/bin/sh
# Doxygen's filter for docs/*.md: gives the pages and SPEC's numbered sections stable ids
# (spec, spec_5, spec_5_1, design) that the header's main page links to, leaving the files
# themselves as they read on GitHub.
case "$1" in
  *SPEC.md)
    sed -E -e '1s/$/ {#spec}/' \
           -e 's/^(##+) ([0-9]+)\.([0-9]+) (.*)$/\1 \2.\3 \4 {#spec_\2_\3}/' \
           -e 's/^(##+) ([0-9]+)\. (.*)$/\1 \2. \3 {#spec_\2}/' "$1" ;;
  *design.md) sed -e '1s/$/ {#design}/' "$1" ;;
  *) cat "$1" ;;
esac
