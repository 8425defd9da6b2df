import os,sys,time,subprocess,shutil,random,statistics
# usage: busy2.py DIR(up|down) RUNS name=bin[:ENV=V,...] ...
def st():
    return list(map(int,open('/proc/stat').readline().split()[1:]))
DOWN=os.environ.get('DOWN','/dev/shm/fx/down/x'); d=sys.argv[1]; n=int(sys.argv[2]); bins=[a.split('=',1) for a in sys.argv[3:]]
res={}
for i in range(n+1):
    random.shuffle(bins)
    for name,spec in bins:
        b,*e=spec.split(':'); env=dict(os.environ)
        for kv in (e[0].split(',') if e else []):
            k,v=kv.split('='); env[k]=v
        shutil.rmtree(DOWN,ignore_errors=True); os.makedirs(DOWN); os.sync()
        shutil.rmtree('/dev/shm/fx/root/up/x',ignore_errors=True); os.makedirs('/dev/shm/fx/root/up/x')
        if d=='up': cmd=[b,'cp','-q','-r',*os.environ.get('XARGS','').split(),'/dev/shm/fx/src','ftp://127.0.0.1:2121/up/x/']
        else: cmd=[b,'cp','-q','-r',*os.environ.get('XARGS','').split(),'ftp://127.0.0.1:2121/pub/set',DOWN+'/']
        a=st(); w=time.time()
        subprocess.run(cmd,check=True,env=env)
        w=time.time()-w; c=st()
        if i>0: res.setdefault(name,[]).append((w,(c[3]-a[3])/100,(c[0]+c[2]+c[6]-a[0]-a[2]-a[6])/100))
for k,v in sorted(res.items()):
    print('%-8s %s wall med %.3f  idle %.3f  busy %.3f'%(k,d,statistics.median(x[0] for x in v),statistics.median(x[1] for x in v),statistics.median(x[2] for x in v)))
