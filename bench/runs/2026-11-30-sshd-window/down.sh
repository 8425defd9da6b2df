#!/bin/bash
D=/var/tmp/wan/bed
kill $(cat $D/sshd.pid2) 2>/dev/null; kill $(cat $D/link.pid) 2>/dev/null; sleep 1; cat $D/link.log | tail -3
