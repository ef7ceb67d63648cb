#!/usr/bin/env python3
"""Generate the DCGM field table and the data tables of this project from NVIDIA's sources.

Generated files (all plain CSV, no comment lines, first line is the header):

  dcgm-sys/fields/fields-4.6.0.csv        id,name,type,size,tag,scope,nvml_field_id,entity_level,short_name,unit,width
  dcgm-sys/fields/aliases-4.6.0.csv       alias,name
  dcgm-sys/fields/health-codes-4.6.0.csv  code,name
  etc/data/xid-descriptions.csv           xid,description

The checked-in files were generated from:

  NVIDIA/DCGM           72fa3fe (DCGM 4.6.0, "DCGM 4.6.0 (#306)")
  NVIDIA/go-dcgm        b7fa315 ("feat: add DCGM 4.6.1 support (#132)"), plus ec245c0, the
                        commit dcgm-exporter pins in go.mod (read automatically)
  NVIDIA/dcgm-exporter  d5e5f51 ("Rename Hostname label to hostname (#655)")

To regenerate (Python 3, standard library only; each source is either a checkout directory
or a git directory plus a revision, read with `git show`):

  python3 dcgm-sys/fields/gen_fields.py \\
      --git-dir /work/.mirror/NVIDIA+DCGM/repo --rev HEAD \\
      --go-dcgm-git-dir /work/.mirror/NVIDIA+go-dcgm/repo --go-dcgm-rev HEAD \\
      --exporter-git-dir /work/.mirror/NVIDIA+dcgm-exporter/repo --exporter-rev HEAD

  python3 dcgm-sys/fields/gen_fields.py ~/src/DCGM --go-dcgm ~/src/go-dcgm --exporter ~/src/dcgm-exporter

What is read, and from where:

* Field ids: every `#define DCGM_FI_<NAME> <number>` of dcgmlib/dcgm_fields.h, minus the
  range markers in MARKERS below.
* Field metadata: the `DcgmFieldsPopulateOneFieldWithFormatting(...)` calls of
  dcgmlib/src/dcgm_fields.cpp, the two `for (fieldId ...)` loops there (NVDEC/NVJPG
  utilisation) and the NVLink profiling range helper
  (`DcgmFieldsPopulateNvLinkProfileFieldRange`). Symbolic arguments are evaluated from their
  definitions: DCGM_FT_*/DCGM_FS_* and the DCGM_FE_* enum in dcgm_fields.h, NVML_FI_* in
  sdk/nvidia/nvml/dcgm_nvml.h, and the getTextForEnum()/getWidthForEnum() switches in
  dcgm_fields.cpp. As in the library, a later call for the same id replaces an earlier one.
* Aliases: (1) `#define DCGM_FI_OLD DCGM_FI_NEW` in dcgm_fields.h, chains resolved;
  (2) names only go-dcgm knows (its pkg/dcgm/dcgm_fields.h and the maps of its generated
  pkg/dcgm/const_fields.go, e.g. the DCGM 4.6.1 renames), mapped by id onto the 4.6 name
  where DCGM 4.6 has that id; (3) the dcgm-exporter 1.x lowercase names of go-dcgm's
  pkg/dcgm/legacy_fields.csv.
* Health codes: the `dcgmError_t` enum of dcgmlib/dcgm_errors.h. Where a code has several
  names (deprecated aliases), the one dcgm-exporter prints as `health_error_code` is used
  (its healthCheckErrorToStringMap in internal/pkg/collector/gpu_health_collector.go, keyed
  by go-dcgm's pkg/dcgm/const.go values), so that labels stay identical.
* XID descriptions: `xidErrCodeToText` in dcgm-exporter's
  internal/pkg/collector/xid_errors.go (the `err_msg` label texts), verbatim.

Checks that make the script fail (exit status 1) rather than write a doubtful table: a call
shape it does not understand, an unknown symbol, a comma or newline inside a value, a
duplicated tag, an alias that is also a field name, and any field name used in
dcgm-exporter's shipped counter CSVs (etc/*.csv, the Helm ConfigMap, the integration-test
CSV) that does not resolve to a field.
"""

import argparse
import csv
import io
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO_ROOT = os.path.dirname(os.path.dirname(HERE))
# Read from DCGM's CMakeLists.txt; the output file names carry it, and dcgm-sys/build.rs reads
# the 4.6.0 ones, so a run against another DCGM version cannot silently replace the 4.6 table.
DCGM_VERSION = "4.6.0"

# Numeric defines of dcgm_fields.h that bound id ranges or mean "no field"; they are not fields.
MARKERS = {
    "DCGM_FI_SYSTEM_FIELD_UNKNOWN",
    "DCGM_FI_UNKNOWN",
    "DCGM_FI_FIRST_VGPU_FIELD_ID",
    "DCGM_FI_LAST_VGPU_FIELD_ID",
    "DCGM_FI_INTERNAL_FIELDS_0_START",
    "DCGM_FI_INTERNAL_FIELDS_0_END",
    "DCGM_FI_FIRST_NVSWITCH_FIELD_ID",
    "DCGM_FI_LAST_NVSWITCH_FIELD_ID",
    "DCGM_FI_DEV_FIRST_CONNECTX_FIELD_ID",
    "DCGM_FI_DEV_LAST_CONNECTX_FIELD_ID",
    "DCGM_FI_MAX_FIELDS",
}
# Alias-shaped range markers (older go-dcgm headers); resolving them to a field would invent a name.
ALIAS_MARKERS = {
    "DCGM_FI_PROF_NVLINK_THROUGHPUT_FIRST",
    "DCGM_FI_PROF_NVLINK_THROUGHPUT_LAST",
}
# Names dcgm-exporter itself handles before asking go-dcgm (internal/pkg/counters/variables.go).
EXPORTER_FIELDS = {
    "DCGM_EXP_XID_ERRORS_COUNT",
    "DCGM_EXP_CLOCK_EVENTS_COUNT",
    "DCGM_EXP_GPU_HEALTH_STATUS",
    "DCGM_EXP_P2P_STATUS",
}
PROM_TYPES = {"gauge", "counter", "histogram", "summary", "label"}


class GenError(Exception):
    pass


def fail(msg):
    raise GenError(msg)


# --------------------------------------------------------------------------------------------
# Source trees: a checkout directory, or a git directory read at one revision.


class Tree:
    def __init__(self, label, path=None, git_dir=None, rev="HEAD"):
        self.label, self.path, self.git_dir, self.rev = label, path, git_dir, rev
        if path and not os.path.isdir(path):
            fail(f"{label}: {path} is not a directory")

    def _git(self, *args):
        git_dir = self.git_dir
        if git_dir is None:
            git_dir = self.path
            if not os.path.exists(os.path.join(self.path, ".git")):
                return None
            args = ("-C", git_dir) + args
        else:
            args = ("--git-dir", git_dir) + args
        r = subprocess.run(["git", *args], capture_output=True, text=True)
        if r.returncode != 0:
            return None
        return r.stdout

    def at(self, rev):
        """The same repository at another revision (git directories only)."""
        if self.git_dir is None:
            return None
        if self._git("cat-file", "-e", f"{rev}^{{commit}}") is None:
            return None
        return Tree(f"{self.label}@{rev}", git_dir=self.git_dir, rev=rev)

    def read(self, rel):
        if self.git_dir is not None:
            out = self._git("show", f"{self.rev}:{rel}")
            if out is None:
                fail(f"{self.label}: cannot read {rel} at {self.rev} from {self.git_dir}")
            return out
        p = os.path.join(self.path, rel)
        try:
            with open(p, encoding="utf-8") as f:
                return f.read()
        except OSError as e:
            fail(f"{self.label}: {e}")

    def exists(self, rel):
        if self.git_dir is not None:
            return self._git("cat-file", "-e", f"{self.rev}:{rel}") is not None
        return os.path.exists(os.path.join(self.path, rel))

    def listdir(self, rel):
        if self.git_dir is not None:
            out = self._git("ls-tree", "--name-only", f"{self.rev}:{rel}")
            return sorted(out.split()) if out else []
        try:
            return sorted(os.listdir(os.path.join(self.path, rel)))
        except OSError:
            return []

    def describe(self):
        rev = self.rev if self.git_dir is not None else "HEAD"
        commit = self._git("rev-parse", "--short=7", f"{rev}^{{commit}}")
        subject = self._git("log", "-1", "--format=%s", rev)
        where = self.git_dir or self.path
        if commit is None:
            return f"{where} (not a git checkout)"
        return f"{where} @ {commit.strip()} ({(subject or '').strip()})"


# --------------------------------------------------------------------------------------------
# C helpers


def strip_c_comments(text):
    """Remove /* */ and // comments, keeping string and char literals (and line numbers) intact."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            out.append(text[i : j + 1])
            i = j + 1
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append("\n" * text.count("\n", i, j))
            i = j
        elif text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        else:
            out.append(c)
            i += 1
    return "".join(out)


def call_args(text, open_paren):
    """Split the argument list of the call whose '(' is at open_paren; returns (args, end)."""
    depth, i, cur, args = 0, open_paren, [], []
    while i < len(text):
        c = text[i]
        if c in "\"'":
            j = i + 1
            while j < len(text) and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            cur.append(text[i : j + 1])
            i = j + 1
            continue
        if c == "(":
            depth += 1
            if depth == 1:
                i += 1
                continue
        elif c == ")":
            depth -= 1
            if depth == 0:
                args.append("".join(cur).strip())
                return args, i + 1
        elif c == "," and depth == 1:
            args.append("".join(cur).strip())
            cur = []
            i += 1
            continue
        cur.append(c)
        i += 1
    fail("unbalanced parentheses in dcgm_fields.cpp")


def block(text, open_brace):
    """The text between the '{' at open_brace and its matching '}'."""
    depth = 0
    for i in range(open_brace, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return text[open_brace + 1 : i]
    fail("unbalanced braces in dcgm_fields.cpp")


def c_string(arg):
    m = re.fullmatch(r'"((?:[^"\\]|\\.)*)"', arg.strip())
    if not m:
        return None
    return re.sub(r"\\(.)", r"\1", m.group(1))


def line_of(text, pos):
    return text.count("\n", 0, pos) + 1


# --------------------------------------------------------------------------------------------
# dcgm_fields.h / dcgm_nvml.h / dcgm_fields.cpp


class Header:
    """What dcgm_fields.h defines: field ids, aliases, type/scope codes, entity groups."""

    def __init__(self, text, label):
        self.ids = {}  # name -> id, real fields only, in file order
        self.markers = {}
        self.aliases = {}  # name -> name it is defined as
        self.doc = {}  # name -> the doc comment just above its define
        for m in re.finditer(r"^[ \t]*#define[ \t]+(DCGM_FI_\w+)[ \t]+(\d+)\b", text, re.M):
            name, fid = m.group(1), int(m.group(2))
            if name in MARKERS:
                self.markers[name] = fid
            elif name in self.ids and self.ids[name] != fid:
                fail(f"{label}:{line_of(text, m.start())}: {name} defined twice with different ids")
            else:
                self.ids[name] = fid
                doc = re.search(r"/\*\*((?:(?!\*/).)*)\*/\s*$", text[max(0, m.start() - 2000) : m.start()], re.S)
                if doc:
                    self.doc[name] = " ".join(l.strip(" *") for l in doc.group(1).splitlines()).strip()
        for m in re.finditer(r"^[ \t]*#define[ \t]+(DCGM_FI_\w+)[ \t]+(DCGM_FI_\w+)\b", text, re.M):
            self.aliases[m.group(1)] = m.group(2)
        self.types = {m.group(1): m.group(2) for m in re.finditer(r"#define\s+(DCGM_FT_\w+)\s+'(.)'", text)}
        scopes = dict(re.findall(r"#define\s+(DCGM_FS_\w+)\s+(\w+)", text))
        self.scopes = {}
        for k in scopes:
            v, seen = scopes[k], set()
            while v in scopes and v not in seen:
                seen.add(v)
                v = scopes[v]
            if v.isdigit():
                self.scopes[k] = int(v)
        enum = re.search(r"typedef\s+enum\s+\w*\s*\{([^}]*)\}\s*dcgm_field_entity_group_t\s*;", strip_c_comments(text), re.S)
        if not enum:
            fail(f"{label}: cannot find the dcgm_field_entity_group_t enum")
        self.entities, nxt = {}, 0
        for item in enum.group(1).split(","):
            item = item.strip()
            if not item:
                continue
            m = re.fullmatch(r"(\w+)(?:\s*=\s*(\d+))?", item)
            if not m:
                fail(f"{label}: entity enum item {item!r} not understood")
            nxt = int(m.group(2)) if m.group(2) else nxt
            self.entities[m.group(1)] = nxt
            nxt += 1
        for need in ("DCGM_FE_NONE", "DCGM_FE_GPU", "DCGM_FE_LINK"):
            if need not in self.entities:
                fail(f"{label}: {need} missing from the entity enum")

    def resolve(self, name):
        """Follow alias chains; returns the final name (which may not be a field)."""
        seen = set()
        while name in self.aliases and name not in seen:
            seen.add(name)
            name = self.aliases[name]
        return name

    def id_of(self, name):
        return self.ids.get(self.resolve(name))


def nvml_field_ids(text):
    defs = dict(re.findall(r"^[ \t]*#define[ \t]+(NVML_FI_\w+)[ \t]+(\w+)", text, re.M))
    out = {}
    for k in defs:
        v, seen = defs[k], set()
        while v in defs and v not in seen:
            seen.add(v)
            v = defs[v]
        if re.fullmatch(r"\d+", v):
            out[k] = int(v)
    return out


class Evaluator:
    """Turns the symbolic arguments of a metadata call into values."""

    def __init__(self, header, nvml, cpp):
        self.h, self.nvml = header, nvml
        self.units = dict(re.findall(r'case\s+(DCGM_FIELD_UNIT_\w+)\s*:\s*return\s+"([^"]*)"\s*;', cpp))
        self.widths = {k: int(v) for k, v in re.findall(r"case\s+(DCGM_FIELD_WIDTH_\w+)\s*:\s*return\s+(\d+)\s*;", cpp)}
        dm = re.search(r"getWidthForEnum\([^)]*\)\s*\{.*?default\s*:\s*return\s+(\d+)\s*;", cpp, re.S)
        self.default_width = int(dm.group(1)) if dm else None
        if not self.units or not self.widths:
            fail("dcgm_fields.cpp: getTextForEnum/getWidthForEnum switches not found")

    SIZEOF = {"std::int64_t": 8, "int64_t": 8, "long long": 8, "double": 8, "std::uint64_t": 8, "uint64_t": 8}

    def integer(self, arg, what, where):
        arg = arg.strip()
        if re.fullmatch(r"-?\d+", arg):
            return int(arg)
        m = re.fullmatch(r"sizeof\(\s*([\w:\s]+?)\s*\)", arg)
        if m and m.group(1) in self.SIZEOF:
            return self.SIZEOF[m.group(1)]
        if arg in self.nvml:
            return self.nvml[arg]
        fail(f"{where}: {what} {arg!r} is not a number or a known NVML_FI_* name")

    def meta(self, args, where):
        if len(args) != 10:
            fail(f"{where}: expected 10 arguments, got {len(args)}: {args}")
        ftype = self.h.types.get(args[1])
        if ftype is None:
            fail(f"{where}: unknown field type {args[1]!r}")
        size = self.integer(args[2], "size", where)
        tag = c_string(args[3])
        if args[4] in self.h.scopes:
            scope = self.h.scopes[args[4]]
        elif args[4] in self.h.entities:
            # One 4.6.0 call passes DCGM_FE_GPU where a scope belongs; C takes its value (1).
            scope = self.h.entities[args[4]]
            print(f"note: {where}: scope given as {args[4]} (= {scope})", file=sys.stderr)
        else:
            fail(f"{where}: unknown scope {args[4]!r}")
        nvml = self.integer(args[5], "NVML field id", where)
        short = c_string(args[6])
        unit = c_string(args[7])
        if unit is None:
            # A C cast in front, e.g. (char *)getTextForEnum(...), changes nothing.
            m = re.fullmatch(r"(?:\([\w\s*]+\)\s*)?getTextForEnum\((\w+)\)", args[7])
            if not m or m.group(1) not in self.units:
                fail(f"{where}: unit {args[7]!r} not understood")
            unit = self.units[m.group(1)]
        entity = self.h.entities.get(args[8])
        if entity is None:
            fail(f"{where}: unknown entity group {args[8]!r}")
        m = re.fullmatch(r"(?:\([\w\s*]+\)\s*)?getWidthForEnum\((\w+)\)", args[9])
        if m:
            width = self.widths.get(m.group(1), self.default_width)
            if width is None:
                fail(f"{where}: unknown width {m.group(1)}")
        else:
            width = self.integer(args[9], "width", where)
        if tag is None or short is None:
            fail(f"{where}: tag/short name must be string literals: {args[3]} {args[6]}")
        return dict(type=ftype, size=size, tag=tag, scope=scope, nvml=nvml, short=short, unit=unit,
                    entity=entity, width=width)


def fmt_format(body, var):
    """The format string of `std::string <var> = fmt::format("...", ...)` in a loop body."""
    m = re.search(r"std::string\s+" + var + r'\s*=\s*fmt::format\(\s*"([^"]*)"', body)
    if not m:
        fail(f"dcgm_fields.cpp: no `{var} = fmt::format(...)` where one was expected; update gen_fields.py")
    return m.group(1)


def parse_metadata(header, cpp_raw, nvml, internal_ids):
    cpp = strip_c_comments(cpp_raw)
    ev = Evaluator(header, nvml, cpp)
    meta, origin, dup = {}, {}, []
    skipped_internal = []
    fn = "DcgmFieldsPopulateOneFieldWithFormatting"

    def put(fid, m, where):
        if fid in meta:
            dup.append((fid, origin[fid], where))
        meta[fid], origin[fid] = m, where

    # 1. Direct calls with a DCGM_FI_* first argument.
    loop_calls = 0
    for m in re.finditer(r"\b" + fn + r"\s*\(", cpp):
        args, _ = call_args(cpp, m.end() - 1)
        where = f"dcgm_fields.cpp:{line_of(cpp, m.start())}"
        first = args[0]
        if first.startswith("unsigned"):
            continue  # the definition
        if first == "fieldId":
            loop_calls += 1
            continue  # inside a loop / the NVLink helper; handled below
        if not re.fullmatch(r"DCGM_FI_\w+", first):
            fail(f"{where}: first argument {first!r} not understood")
        fid = header.id_of(first)
        if fid is None:
            if first in internal_ids:
                skipped_internal.append((first, internal_ids[first]))
                continue
            fail(f"{where}: {first} is neither a public nor an internal field id")
        put(fid, ev.meta(args, where), where)

    # 2. for (unsigned int fieldId = FIRST; fieldId <= LAST; fieldId++) { tag/shortTag via fmt::format(fmt, fieldId - FIRST) }
    loops = 0
    for m in re.finditer(r"for\s*\(\s*unsigned\s+int\s+fieldId\s*=\s*(DCGM_FI_\w+)\s*;\s*fieldId\s*<=\s*(DCGM_FI_\w+)\s*;", cpp):
        body = block(cpp, cpp.index("{", m.end()))
        where = f"dcgm_fields.cpp:{line_of(cpp, m.start())}"
        first, last = header.id_of(m.group(1)), header.id_of(m.group(2))
        if first is None or last is None or last < first:
            fail(f"{where}: loop bounds {m.group(1)}..{m.group(2)} not understood")
        for var in ("tag", "shortTag"):
            if not re.search(var + r"\s*=\s*fmt::format\(\s*\"[^\"]*\"\s*,\s*fieldId\s*-\s*" + m.group(1) + r"\s*\)", body):
                fail(f"{where}: loop body changed shape ({var}); update gen_fields.py")
        tag_fmt, short_fmt = fmt_format(body, "tag"), fmt_format(body, "shortTag")
        cm = re.search(r"\b" + fn + r"\s*\(", body)
        args, _ = call_args(body, cm.end() - 1)
        if args[0] != "fieldId" or args[3] != "tag.c_str()" or args[6] != "shortTag.c_str()":
            fail(f"{where}: loop call changed shape; update gen_fields.py")
        for fid in range(first, last + 1):
            n = fid - first
            a = list(args)
            a[3], a[6] = '"' + tag_fmt.replace("{}", str(n)) + '"', '"' + short_fmt.replace("{}", str(n)) + '"'
            put(fid, ev.meta(a, where), where)
        loops += 1
        loop_calls -= 1

    # 3. The NVLink profiling helper: link = firstLink + (id - first) / 2, odd offsets are RX.
    hm = re.search(r"static\s+void\s+DcgmFieldsPopulateNvLinkProfileFieldRange\s*\(([^)]*)\)\s*\{", cpp)
    if not hm:
        fail("dcgm_fields.cpp: DcgmFieldsPopulateNvLinkProfileFieldRange not found; update gen_fields.py")
    hbody = block(cpp, hm.end() - 1)
    expect = [r"linkId\s*=\s*firstLinkId\s*\+\s*\(fieldId\s*-\s*firstFieldId\)\s*/\s*2",
              r"isRx\s*=\s*\(fieldId\s*-\s*firstFieldId\)\s*&\s*1",
              r'fmt::format\(\s*"nvlink_l\{\}_\{\}_bytes"\s*,\s*linkId\s*,\s*\(isRx\s*\?\s*"rx"\s*:\s*"tx"\)\s*\)',
              r'fmt::format\(\s*"NVL\{\}\{\}"\s*,\s*linkId\s*,\s*\(isRx\s*\?\s*"R"\s*:\s*"T"\)\s*\)']
    for e in expect:
        if not re.search(e, hbody):
            fail(f"dcgm_fields.cpp: the NVLink helper changed shape ({e}); update gen_fields.py")
    cm = re.search(r"\b" + fn + r"\s*\(", hbody)
    hargs, _ = call_args(hbody, cm.end() - 1)
    loop_calls -= 1
    ranges = 0
    for m in re.finditer(r"\bDcgmFieldsPopulateNvLinkProfileFieldRange\s*\(\s*(DCGM_FI_\w+)\s*,\s*(DCGM_FI_\w+)\s*,\s*(\d+)\s*\)\s*;", cpp):
        where = f"dcgm_fields.cpp:{line_of(cpp, m.start())}"
        first, last, link0 = header.id_of(m.group(1)), header.id_of(m.group(2)), int(m.group(3))
        if first is None or last is None:
            fail(f"{where}: NVLink range bounds not understood")
        for fid in range(first, last + 1):
            link, rx = link0 + (fid - first) // 2, (fid - first) & 1
            a = list(hargs)
            a[3] = f'"nvlink_l{link}_{"rx" if rx else "tx"}_bytes"'
            a[6] = f'"NVL{link}{"R" if rx else "T"}"'
            put(fid, ev.meta(a, where), where)
        ranges += 1
    if loop_calls != 0 or ranges == 0 or loops == 0:
        fail(f"dcgm_fields.cpp: {loop_calls} calls inside loops not accounted for; update gen_fields.py")
    return meta, dup, skipped_internal


def fallback_meta(header, name):
    """Best-effort metadata for a define that has no metadata call (the library does not know it)."""
    doc = header.doc.get(name, "").lower()
    ftype = "s" if "string" in doc else "d" if ("ratio" in doc or "double" in doc) else "i"
    return dict(type=ftype, size=0 if ftype == "s" else 8, tag="", scope=1, nvml=0, short="", unit="",
                entity=1, width=10)


# --------------------------------------------------------------------------------------------
# go-dcgm names


def go_dcgm_names(tree):
    """name -> id for every field name a go-dcgm revision knows (header and generated maps)."""
    h = Header(tree.read("pkg/dcgm/dcgm_fields.h"), f"{tree.label}:pkg/dcgm/dcgm_fields.h")
    names = {}
    for n, i in h.ids.items():
        names[n] = i
    for n in h.aliases:
        if n in ALIAS_MARKERS:
            continue
        i = h.id_of(n)
        if i is not None:
            names[n] = i
    if tree.exists("pkg/dcgm/const_fields.go"):
        go = tree.read("pkg/dcgm/const_fields.go")
        for mm in re.finditer(r"var\s+(dcgmFields|legacyDCGMFields)\s*=\s*map\[string\]Short\s*\{(.*?)\n\}", go, re.S):
            for n, i in re.findall(r'"(\w+)"\s*:\s*(\d+)\s*,', mm.group(2)):
                if n not in MARKERS and n not in ALIAS_MARKERS:
                    names.setdefault(n, int(i))
    return names


def legacy_names(tree):
    text = tree.read("pkg/dcgm/legacy_fields.csv")
    rows = list(csv.reader(io.StringIO(text)))
    if not rows or [c.strip() for c in rows[0]] != ["name", "id"]:
        fail(f"{tree.label}: pkg/dcgm/legacy_fields.csv: expected header 'name,id'")
    out = {}
    for n, row in enumerate(rows[1:], start=2):
        if not row:
            continue
        if len(row) != 2 or not row[1].strip().isdigit():
            fail(f"{tree.label}: pkg/dcgm/legacy_fields.csv:{n}: bad row {row}")
        out[row[0].strip()] = int(row[1])
    return out


def pinned_go_dcgm_commit(exporter):
    if exporter is None or not exporter.exists("go.mod"):
        return None
    m = re.search(r"github\.com/NVIDIA/go-dcgm\s+v\S+-([0-9a-f]{12})\b", exporter.read("go.mod"))
    return m.group(1) if m else None


# --------------------------------------------------------------------------------------------
# Health codes and XIDs


def health_codes(errors_h, exporter, go_dcgm):
    text = strip_c_comments(errors_h)
    m = re.search(r"typedef\s+enum\s+dcgmError_enum\s*\{(.*?)\}\s*dcgmError_t\s*;", text, re.S)
    if not m:
        fail("dcgm_errors.h: dcgmError_t enum not found")
    values, order, nxt = {}, [], 0
    for item in m.group(1).split(","):
        item = " ".join(item.split())
        if not item:
            continue
        im = re.fullmatch(r"(DCGM_FR_\w+)(?:\s*=\s*(\w+))?", item)
        if not im:
            fail(f"dcgm_errors.h: enum item {item!r} not understood")
        name, expr = im.group(1), im.group(2)
        if expr is None:
            val = nxt
        elif expr.isdigit():
            val = int(expr)
        elif expr in values:
            val = values[expr]
        else:
            fail(f"dcgm_errors.h: {name} = {expr}: unknown value")
        values[name] = val
        order.append(name)
        nxt = val + 1
    by_code = {}
    for name in order:
        by_code.setdefault(values[name], []).append(name)

    # What dcgm-exporter prints for each numeric code.
    printed = {}
    if exporter is not None and go_dcgm is not None:
        src = exporter.read("internal/pkg/collector/gpu_health_collector.go")
        mm = re.search(r"healthCheckErrorToStringMap\s*=\s*map\[[^\]]+\]string\s*\{(.*?)\n\}", src, re.S)
        const = go_dcgm.read("pkg/dcgm/const.go")
        go_vals = {k: int(v) for k, v in re.findall(r"\b(DCGM_FR_\w+)\s+HealthCheckErrorCode\s*=\s*(\d+)", const)}
        if mm:
            for const_name, label in re.findall(r"dcgm\.(DCGM_FR_\w+)\s*:\s*\"([^\"]+)\"", mm.group(1)):
                if const_name in go_vals:
                    printed[go_vals[const_name]] = label
    rows, notes = [], []
    for code in sorted(by_code):
        names = by_code[code]
        name = names[0]
        label = printed.get(code)
        if label is not None and label in names:
            name = label
        elif label is not None:
            notes.append(f"code {code}: dcgm-exporter prints {label}, DCGM 4.6 calls it {'/'.join(names)}")
        elif printed:
            notes.append(f"code {code} ({name}): not in dcgm-exporter's map (it prints DCGM_FR_UNKNOWN({code}))")
        rows.append((code, name))
    return rows, notes


def go_string(s):
    out, i = [], 0
    while i < len(s):
        if s[i] == "\\":
            nx = s[i + 1]
            out.append({"n": "\n", "t": "\t", "\\": "\\", '"': '"'}.get(nx, nx))
            i += 2
        else:
            out.append(s[i])
            i += 1
    return "".join(out)


def xid_descriptions(exporter):
    src = exporter.read("internal/pkg/collector/xid_errors.go")
    m = re.search(r"var\s+xidErrCodeToText\s*=\s*\[\]string\s*\{(.*?)\n\}", src, re.S)
    if not m:
        fail("xid_errors.go: xidErrCodeToText not found")
    table = {}
    for line in m.group(1).splitlines():
        line = line.strip()
        if not line or line.startswith("//"):
            continue
        lm = re.fullmatch(r'(\d+)\s*:\s*"((?:[^"\\]|\\.)*)"\s*,', line)
        if not lm:
            fail(f"xid_errors.go: line {line!r} not understood")
        table[int(lm.group(1))] = go_string(lm.group(2))
    top = max(table)
    # A Go slice literal with indices leaves gaps as "", which the exporter would print.
    return [(x, table.get(x, "")) for x in range(top + 1)]


# --------------------------------------------------------------------------------------------
# Checking dcgm-exporter's counter CSVs


def counter_names(text):
    """(line, name, commented) for each counters-CSV record in text (also inside '#' comments)."""
    out = []
    for n, line in enumerate(text.splitlines(), start=1):
        s = line.strip()
        commented = s.startswith("#")
        s = s.lstrip("#").strip()
        cols = [c.strip() for c in s.split(",")]
        if len(cols) >= 3 and re.fullmatch(r"(DCGM|dcgm)_\w+", cols[0]) and cols[1] in PROM_TYPES:
            out.append((n, cols[0], commented))
    return out


def check_exporter_csvs(exporter, resolves):
    files = [f"etc/{f}" for f in exporter.listdir("etc") if f.endswith(".csv")]
    for extra in ("deployment/templates/metrics-configmap.yaml", "tests/integration/testdata/default-counters.csv"):
        if exporter.exists(extra):
            files.append(extra)
    checked, bad = 0, []
    for f in files:
        for line, name, commented in counter_names(exporter.read(f)):
            checked += 1
            if name not in EXPORTER_FIELDS and not resolves(name):
                bad.append(f"{f}:{line}: {name}{' (commented out)' if commented else ''}")
    return files, checked, bad


# --------------------------------------------------------------------------------------------


def write_csv(path, header, rows):
    for r in rows:
        for c in r:
            if "," in str(c) or "\n" in str(c) or '"' in str(c):
                fail(f"{path}: value {c!r} of row {r} contains a comma, quote or newline")
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8", newline="\n") as f:
        f.write(",".join(header) + "\n")
        for r in rows:
            f.write(",".join(str(c) for c in r) + "\n")
    os.replace(tmp, path)


def tree_from(args, prefix, label, required):
    path = getattr(args, prefix.replace("-", "_")) if prefix else args.checkout
    git_dir = getattr(args, (prefix + "_git_dir").replace("-", "_")) if prefix else args.git_dir
    rev = getattr(args, (prefix + "_rev").replace("-", "_")) if prefix else args.rev
    if path and git_dir:
        fail(f"{label}: give a directory or a git directory, not both")
    if not path and not git_dir:
        if required:
            fail(f"{label}: no source given (see --help)")
        return None
    return Tree(label, path=path, git_dir=git_dir, rev=rev)


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("checkout", nargs="?", help="NVIDIA/DCGM checkout directory")
    ap.add_argument("--git-dir", help="NVIDIA/DCGM git directory (read with git show)")
    ap.add_argument("--rev", default="HEAD", help="revision of --git-dir (default HEAD)")
    ap.add_argument("--go-dcgm", help="NVIDIA/go-dcgm checkout directory")
    ap.add_argument("--go-dcgm-git-dir", help="NVIDIA/go-dcgm git directory")
    ap.add_argument("--go-dcgm-rev", default="HEAD")
    ap.add_argument("--exporter", help="NVIDIA/dcgm-exporter checkout directory")
    ap.add_argument("--exporter-git-dir", help="NVIDIA/dcgm-exporter git directory")
    ap.add_argument("--exporter-rev", default="HEAD")
    ap.add_argument("--fields-dir", default=HERE, help="where the field/alias/health CSVs go (default: next to this script)")
    ap.add_argument("--data-dir", default=os.path.join(REPO_ROOT, "etc", "data"),
                    help="where xid-descriptions.csv goes (default: <repo>/etc/data)")
    args = ap.parse_args(argv)
    try:
        return run(args)
    except GenError as e:
        print(f"gen_fields.py: error: {e}", file=sys.stderr)
        return 1


def run(args):
    dcgm = tree_from(args, "", "DCGM", True)
    go_dcgm = tree_from(args, "go_dcgm", "go-dcgm", True)
    exporter = tree_from(args, "exporter", "dcgm-exporter", True)
    print(f"DCGM:          {dcgm.describe()}", file=sys.stderr)
    print(f"go-dcgm:       {go_dcgm.describe()}", file=sys.stderr)
    print(f"dcgm-exporter: {exporter.describe()}", file=sys.stderr)

    global DCGM_VERSION
    if dcgm.exists("CMakeLists.txt"):
        vm = re.search(r"project\(\s*[\w-]+\s+VERSION\s+([\d.]+)", dcgm.read("CMakeLists.txt"))
        if vm:
            DCGM_VERSION = vm.group(1)
    print(f"DCGM version:  {DCGM_VERSION}", file=sys.stderr)
    header = Header(dcgm.read("dcgmlib/dcgm_fields.h"), "dcgm_fields.h")
    nvml = nvml_field_ids(dcgm.read("sdk/nvidia/nvml/dcgm_nvml.h"))
    internal_h = dcgm.read("dcgmlib/dcgm_fields_internal.hpp")
    internal_ids = {n: int(i) for n, i in re.findall(r"^[ \t]*#define[ \t]+(DCGM_FI_\w+)[ \t]+(\d+)\b", internal_h, re.M)}
    meta, dups, skipped_internal = parse_metadata(header, dcgm.read("dcgmlib/src/dcgm_fields.cpp"), nvml, internal_ids)

    # One row per id; if two public names share an id, the first in the header is the name.
    by_id = {}
    for name, fid in header.ids.items():
        if fid in by_id:
            print(f"note: {name} and {by_id[fid]} share id {fid}; {name} becomes an alias", file=sys.stderr)
            header.aliases.setdefault(name, by_id[fid])
            continue
        by_id[fid] = name
    no_meta = sorted(fid for fid in by_id if fid not in meta)
    orphan_meta = sorted(fid for fid in meta if fid not in by_id)
    if orphan_meta:
        fail(f"metadata for ids without a public define: {orphan_meta}")
    rows = []
    for fid in sorted(by_id):
        m = meta.get(fid) or fallback_meta(header, by_id[fid])
        rows.append((fid, by_id[fid], m["type"], m["size"], m["tag"], m["scope"], m["nvml"], m["entity"],
                     m["short"], m["unit"], m["width"]))
    tags = {}
    for r in rows:
        if r[4] and r[4] in tags:
            fail(f"tag {r[4]!r} used by ids {tags[r[4]]} and {r[0]}")
        tags[r[4]] = r[0]
    canonical = {r[1]: r[0] for r in rows}

    # Aliases: DCGM's own first.
    aliases = {}
    alias_src = {}
    for a in header.aliases:
        target = header.resolve(a)
        if a in canonical:
            continue
        if target not in canonical:
            print(f"note: alias {a} -> {target} does not lead to a field; skipped", file=sys.stderr)
            continue
        aliases[a], alias_src[a] = target, "dcgm"
    # Then names only go-dcgm knows, at its given revision and at the one dcgm-exporter pins.
    go_trees = [go_dcgm]
    pin = pinned_go_dcgm_commit(exporter)
    if pin:
        pinned = go_dcgm.at(pin)
        if pinned is not None:
            go_trees.append(pinned)
        else:
            print(f"note: go-dcgm commit {pin} pinned by dcgm-exporter is not in the go-dcgm source; not read", file=sys.stderr)
    go_only_missing, conflicts = {}, []
    for t in go_trees:
        for n, fid in sorted(go_dcgm_names(t).items()):
            if n.startswith("dcgm_"):
                continue  # the 1.x names come from legacy_fields.csv below
            if n in canonical:
                if canonical[n] != fid:
                    conflicts.append(f"{t.label}: {n} is id {fid} there but {canonical[n]} in DCGM {DCGM_VERSION}")
                continue
            if n in aliases:
                if canonical[aliases[n]] != fid:
                    conflicts.append(f"{t.label}: {n} is id {fid} there but {canonical[aliases[n]]} in DCGM {DCGM_VERSION}")
                continue
            if fid not in by_id:
                go_only_missing[n] = fid
                continue
            aliases[n], alias_src[n] = by_id[fid], "go-dcgm"
    legacy = {}
    for n, fid in sorted(legacy_names(go_dcgm).items()):
        if fid not in by_id:
            fail(f"legacy name {n} -> {fid}: no such field in DCGM {DCGM_VERSION}")
        if n in canonical or n in aliases:
            fail(f"legacy name {n} clashes with a DCGM name")
        legacy[n] = by_id[fid]
    for c in conflicts:
        print(f"warning: {c}", file=sys.stderr)

    alias_rows = [(a, aliases[a]) for a in sorted(aliases, key=lambda a: (alias_src[a] != "dcgm", a))]
    alias_rows += sorted(legacy.items())

    def resolves(name):
        return name in canonical or name in aliases or name in legacy

    files, checked, bad = check_exporter_csvs(exporter, resolves)

    health, health_notes = health_codes(dcgm.read("dcgmlib/dcgm_errors.h"), exporter,
                                        go_trees[-1] if len(go_trees) > 1 else go_dcgm)
    xids = xid_descriptions(exporter)

    os.makedirs(args.fields_dir, exist_ok=True)
    os.makedirs(args.data_dir, exist_ok=True)
    write_csv(os.path.join(args.fields_dir, f"fields-{DCGM_VERSION}.csv"),
              ["id", "name", "type", "size", "tag", "scope", "nvml_field_id", "entity_level", "short_name", "unit", "width"],
              rows)
    write_csv(os.path.join(args.fields_dir, f"aliases-{DCGM_VERSION}.csv"), ["alias", "name"], alias_rows)
    write_csv(os.path.join(args.fields_dir, f"health-codes-{DCGM_VERSION}.csv"), ["code", "name"], health)
    xid_path = os.path.join(args.data_dir, "xid-descriptions.csv")
    with open(xid_path + ".tmp", "w", encoding="utf-8", newline="") as f:
        # Descriptions contain commas, so they are quoted (RFC 4180); the header is not.
        f.write("xid,description\n")
        w = csv.writer(f, quoting=csv.QUOTE_NONNUMERIC, lineterminator="\n")
        for x, d in xids:
            w.writerow([x, d])
    os.replace(xid_path + ".tmp", xid_path)

    # Report.
    n_dcgm = sum(1 for a in alias_src.values() if a == "dcgm")
    n_go = sum(1 for a in alias_src.values() if a == "go-dcgm")
    print(f"fields:        {len(rows)} (numeric DCGM_FI_* defines {len(header.ids)} + markers {len(header.markers)})")
    print(f"aliases:       {len(alias_rows)} = DCGM {DCGM_VERSION} deprecated {n_dcgm} + go-dcgm-only {n_go} + 1.x legacy {len(legacy)}")
    print(f"health codes:  {len(health)}; XIDs: 0..{len(xids) - 1}")
    print(f"exporter CSVs: {checked} names in {len(files)} files checked, {len(bad)} unresolved")
    for fid, first, second in dups:
        print(f"note: id {fid} has two metadata calls ({first}, {second}); the later one wins, as in the library")
    for n, fid in skipped_internal:
        print(f"note: {n} ({fid}) is an internal field (dcgm_fields_internal.hpp); not in the public table")
    for fid in no_meta:
        print(f"WARNING: {by_id[fid]} ({fid}) has no metadata call; row filled from its header comment")
    for n, fid in sorted(go_only_missing.items(), key=lambda x: x[1]):
        print(f"note: go-dcgm name {n} ({fid}) has no DCGM {DCGM_VERSION} field; not aliased")
    for n in health_notes:
        print(f"note: health {n}")
    for b in bad:
        print(f"UNRESOLVED: {b}")
    if bad:
        fail(f"{len(bad)} counter names from dcgm-exporter's CSVs do not resolve")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
