"""hab.py ROUNDS name=BIN ...: `ferry cp -q -r SRC https://127.0.0.1:8443/` per build,
interleaved, against a ferry serve started as
  ferry serve --no-sftp --https 127.0.0.1:8443 --writable --token tok \
    --state-dir /dev/shm/hs/state /dev/shm/hs/root
with PIN set to the certificate's sha256 it prints; the root is emptied before each run.
Prints the median wall and client CPU seconds per build (round 0 is a warm-up)."""
import subprocess, random, time, statistics, resource, os, sys
builds=[a.split('=',1) for a in sys.argv[2:]]; R=int(sys.argv[1]); res={n:[] for n,_ in builds}
src=os.environ.get('SRC','/dev/shm/hx/huge')
for r in range(R+1):
    random.shuffle(builds)
    for n,b in builds:
        subprocess.run('rm -rf /dev/shm/hs/root/*', shell=True); time.sleep(1)
        r0=resource.getrusage(resource.RUSAGE_CHILDREN); t0=time.time()
        subprocess.run([b,'cp','-q','-r','--pin',os.environ['PIN'],'--token','tok',src,'https://127.0.0.1:8443/'],check=True)
        t=time.time()-t0; r1=resource.getrusage(resource.RUSAGE_CHILDREN)
        if r: res[n].append((t,(r1.ru_utime-r0.ru_utime)+(r1.ru_stime-r0.ru_stime)))
for n in res:
    print(n,'wall %.3f'%statistics.median(x[0] for x in res[n]),'client cpu %.3f'%statistics.median(x[1] for x in res[n]))
