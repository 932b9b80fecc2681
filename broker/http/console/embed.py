#!/usr/bin/env python3
"""Turns a file into a C header holding it as an array (the console page,
served from the binary): embed.py INPUT OUTPUT NAME."""
import sys

src, dst, name = sys.argv[1:4]
data = open(src, "rb").read()
with open(dst, "w") as f:
    f.write("/* generated from %s by embed.py: do not edit */\n" % src.split("/")[-1])
    f.write("static const unsigned char %s[] = {\n" % name)
    for i in range(0, len(data), 16):
        f.write("\t" + ", ".join("0x%02x" % b for b in data[i:i + 16]) + ",\n")
    f.write("};\nstatic const unsigned long %s_len = %d;\n" % (name, len(data)))
