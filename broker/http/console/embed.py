#!/usr/bin/env python3
"""Turns a file into a C header holding it as an array (the console page,
served from the binary): embed.py INPUT OUTPUT NAME.

For an HTML page it also writes NAME_csp, the Content-Security-Policy the
page is served with: its own inline <script> and <style> blocks allowed by
their SHA-256 hashes and nothing else (no other script, no inline handler
or style attribute, no framing), so the hashes always match the page."""
import base64
import hashlib
import re
import sys

src, dst, name = sys.argv[1:4]
data = open(src, "rb").read()


def hashes(tag):
    """'sha256-...' of each <tag>...</tag> block's text, as the browser hashes it."""
    out = []
    for m in re.finditer(rb"<%s(?:\s[^>]*)?>(.*?)</%s>" % (tag, tag), data, re.S | re.I):
        out.append("'sha256-%s'" % base64.b64encode(hashlib.sha256(m.group(1)).digest()).decode())
    return " ".join(out) or "'none'"


with open(dst, "w") as f:
    f.write("/* generated from %s by embed.py: do not edit */\n" % src.split("/")[-1])
    f.write("static const unsigned char %s[] = {\n" % name)
    for i in range(0, len(data), 16):
        f.write("\t" + ", ".join("0x%02x" % b for b in data[i:i + 16]) + ",\n")
    f.write("};\nstatic const unsigned long %s_len = %d;\n" % (name, len(data)))
    if src.endswith(".html"):
        csp = ("default-src 'none'; script-src %s; style-src %s; connect-src 'self'; "
               "img-src data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
               % (hashes(b"script"), hashes(b"style")))
        f.write("static const char %s_csp[] = \"%s\";\n" % (name, csp))
