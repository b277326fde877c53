"""Renders a Helm chart with the Helm engine of helm-python-sdk (no helm binary installs here).

    helm-render.py CHART VALUES NAME NAMESPACE           JSON {template path: rendered YAML}
    helm-render.py --manifests CHART VALUES NAME NAMESPACE
                                                          the plain manifests: one file per
                                                          template that renders an object, as
                                                          JSON {file name: YAML}
    helm-render.py --lint CHART VALUES NAMESPACE         helm lint --strict's findings (JSON);
                                                          exit 1 on an error

VALUES is a JSON file, or a YAML file when its name ends in .yaml (read as `helm -f` reads it).
Run with the interpreter of .ci/helm-venv.sh; used by tests/it/chart.rs and
deploy/kubernetes/generate.sh. A render error is printed on stderr with exit status 2.
"""
import json
import os
import sys

from helm_python.chart import Chart, lint, values_from_yaml

HEADER = (
    "# Generated from deploy/helm/magnum-capi by deploy/kubernetes/generate.sh "
    "(values: deploy/kubernetes/values.yaml); do not edit.\n"
)


def read_values(path):
    with open(path) as f:
        text = f.read()
    return values_from_yaml(text) if path.endswith(".yaml") else json.loads(text)


def render(chart, values, name, namespace):
    with Chart.load(chart) as c:
        return c.render(values=values, name=name, namespace=namespace, is_install=True)


def manifests(rendered):
    """templates/x.yaml → x.yaml, for the templates that render something."""
    out = {}
    for path, text in sorted(rendered.items()):
        base = os.path.basename(path)
        if not base.endswith(".yaml") or "/templates/" not in path:
            continue
        body = text.strip("\n")
        if not any(
            line.strip() and not line.lstrip().startswith("#") and line.strip() != "---"
            for line in body.splitlines()
        ):
            continue
        out[base] = HEADER + body + "\n"
    return out


def main(argv):
    if argv[1] == "--lint":
        report = lint(argv[2], read_values(argv[3]), strict=True, namespace=argv[4])
        json.dump(report, sys.stdout)
        return 1 if report.get("errors") else 0
    split = argv[1] == "--manifests"
    chart, values_file, name, namespace = argv[2:6] if split else argv[1:5]
    try:
        out = render(chart, read_values(values_file), name, namespace)
    except Exception as e:  # the engine's message is the useful part
        print(f"{type(e).__name__}: {e}", file=sys.stderr)
        return 2
    json.dump(manifests(out) if split else out, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
