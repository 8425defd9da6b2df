import os,sys,time,subprocess,shutil,random,statistics
# pair.py N EXTRA up|down name=bin ... (first name is the reference for ratios... last is 'loop')
n=int(sys.argv[1]); extra=sys.argv[2].split(); d=sys.argv[3]; bins=[a.split('=',1) for a in sys.argv[4:]]
ref=bins[-1][0]
res={}; rat={}
for i in range(n+1):
    order=bins[:]; random.shuffle(order); w={}
    for name,b in order:
        R=os.environ.get('ROOT','/dev/shm/fx/root')
        shutil.rmtree(R+'/up/x',ignore_errors=True); os.makedirs(R+'/up/x')
        shutil.rmtree('/dev/shm/fx/down/x',ignore_errors=True); os.makedirs('/dev/shm/fx/down/x')
        if d=='up': cmd=[b,'cp','-q','-r']+extra+[os.environ.get('SRC','/dev/shm/fx/src2/small'),os.environ.get('URL','ftp://127.0.0.1:2121')+'/up/x/']
        else: cmd=[b,'cp','-q','-r']+extra+[os.environ.get('URL','ftp://127.0.0.1:2121')+'/'+os.environ.get('RSRC','pub/small'),'/dev/shm/fx/down/x/']
        t=time.time(); subprocess.run(cmd,check=True); w[name]=time.time()-t
    if i==0: continue
    for k,v in w.items():
        res.setdefault(k,[]).append(v); rat.setdefault(k,[]).append(w[ref]/v)
for k in res:
    print('%-6s %s med %.4f  paired %s/x med %.3f'%(k,d,statistics.median(res[k]),ref,statistics.median(rat[k])))
