import os,sys,time,subprocess,shutil,random,statistics
# busy4.py up|down N SRCDIR(remote path or local) name=bin ...
def st():
    return list(map(int,open('/proc/stat').readline().split()[1:]))
DOWN=os.environ.get('DOWN','/dev/shm/fx/down/x'); d=sys.argv[1]; n=int(sys.argv[2]); what=sys.argv[3]; bins=[a.split('=',1) for a in sys.argv[4:]]
res={}
for i in range(n+1):
    random.shuffle(bins)
    for name,b in bins:
        shutil.rmtree(DOWN,ignore_errors=True); os.makedirs(DOWN); os.sync()
        shutil.rmtree('/dev/shm/fx/root/up/x',ignore_errors=True); os.makedirs('/dev/shm/fx/root/up/x')
        if d=='up': cmd=[b,'cp','-q','-r',what,'ftp://127.0.0.1:2121/up/x/']
        else: cmd=[b,'cp','-q','-r','ftp://127.0.0.1:2121/'+what,DOWN+'/']
        a=st(); w=time.time()
        subprocess.run(cmd,check=True)
        w=time.time()-w; c=st()
        if i>0: res.setdefault(name,[]).append((w,(c[3]-a[3])/100,(c[0]+c[2]+c[6]-a[0]-a[2]-a[6])/100))
for k,v in sorted(res.items()):
    print('%-8s %s wall med %.3f  idle %.3f  busy %.3f'%(k,d,statistics.median(x[0] for x in v),statistics.median(x[1] for x in v),statistics.median(x[2] for x in v)))
