#!/usr/bin/env python3
"""Test helper: renders the chart with Helm's own template engine (Helm's Go SDK, through
the PyPI package helm-python-sdk) or loads a plain manifest file, and prints the objects as
one JSON list; with --out DIR it also writes each object to DIR as YAML for schema checks.

  helm_render.py render CHART_DIR VALUES [--out DIR]   (values: a JSON or YAML file, '-' = stdin)
  helm_render.py load MANIFEST.yaml [--out DIR]
  helm_render.py lint CHART_DIR VALUES

Exit 3 when a needed Python package is missing (the Rust tests skip then)."""
import json
import os
import sys

try:
    import yaml
except ImportError:
    print("PyYAML is not installed", file=sys.stderr)
    sys.exit(3)


def helm():
    try:
        import helm_python
    except ImportError:
        print("helm-python-sdk is not installed (pip install helm-python-sdk)", file=sys.stderr)
        sys.exit(3)
    return helm_python


def read_values(arg):
    text = sys.stdin.read() if arg == "-" else open(arg).read()
    # JSON is YAML too; an empty file is no values.
    return yaml.safe_load(text) or {}


def documents(texts):
    objects = []
    for source, text in texts:
        for doc in yaml.safe_load_all(text):
            if doc:
                objects.append((source, doc))
    return objects


def main(argv):
    out_dir = None
    if "--out" in argv:
        i = argv.index("--out")
        out_dir = argv[i + 1]
        del argv[i : i + 2]
    cmd = argv[1]
    if cmd == "render":
        h = helm()
        chart = h.Chart.load(argv[2])
        rendered = chart.render(
            read_values(argv[3]), name="dcgm-exporter", namespace="gpu-monitoring", is_install=True
        )
        # Every rendered template is a manifest, whatever its extension (NVIDIA's chart has a
        # config-configmap.tpl), except NOTES.txt, as `helm install` and `helm template` do;
        # partials (_*.tpl) are not in the result.
        texts = [(k, v) for k, v in sorted(rendered.items()) if not k.endswith("/NOTES.txt")]
    elif cmd == "load":
        texts = [(argv[2], open(argv[2]).read())]
    elif cmd == "lint":
        h = helm()
        result = h.lint(argv[2], read_values(argv[3]), strict=True, namespace="gpu-monitoring")
        print(json.dumps(result, default=str))
        return
    else:
        print(f"unknown command {cmd}", file=sys.stderr)
        sys.exit(2)
    objects = documents(texts)
    if out_dir:
        os.makedirs(out_dir, exist_ok=True)
        for n, (_, doc) in enumerate(objects):
            with open(os.path.join(out_dir, f"{n:02}-{doc['kind']}.yaml"), "w") as f:
                yaml.safe_dump(doc, f)
    print(json.dumps([doc for _, doc in objects]))


if __name__ == "__main__":
    main(sys.argv)
