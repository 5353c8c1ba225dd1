/* adevents v.js: viewability and engagement, docs/API.md; the why in src/http/browser/assets.rs.
In view: page visible, element not empty, intersectionRatio >= .5 (.3 from 242500 px2); a timer
per stretch makes it viewable at 1 s (2 s video). Reports: measurable at once, viewable, kinds
batched 1 s, a last one on hidden page or end (pagehide, 590 s); at most 5, the 5th kept for a
last one; none after 600 s. */
(function(){try{
var d=document,w=window,n=navigator,s=d.currentScript,O=w.IntersectionObserver,g;
function a(x){return s.getAttribute(x)}
if(!s||!O||!(g=a("data-tag")))return;
function N(){return performance.now()}
function G(f){return function(x){try{done||f(x)}catch(_){}}}
function on(t,e,f){t.addEventListener(e,G(f))}
var id=a("data-target"),p=s.parentElement,u=new URL("/v?"+g,s.src).href,
L=a("data-format")=="video"?2e3:1e3,t0=N(),z=5,S={},q=[],B=0,st=-1,r=0,ar=0,mx=0,lv=-1,lm=-1,done=0,T,H,D,F,io,th=[],i,
y="application/x-www-form-urlencoded";
for(i=0;i<=100;i++)th.push(i/100);
function V(){return Math.min(6e5,Math.floor(Math.max(B,st<0?0:N()-st)))}
function R(last){var v=V(),m=mx,b;
if(done||!z||N()-t0>6e5||(last?!q.length&&v==lv&&m==lm:!q.length||z<2))return;
z--;lv=v;lm=m;b="e="+q+"&in_view_ms="+v+"&max_visible="+m;q=[];
try{if(!(n.sendBeacon&&n.sendBeacon(u,new Blob([b],{type:y}))))
fetch(u,{method:"POST",body:b,keepalive:true,headers:{"Content-Type":y},credentials:"omit"}).catch(function(){})}catch(_){}}
function A(k){if(!S[k])return S[k]=q.push(k)}
function E(k){A(k)&&!D&&(D=setTimeout(G(function(){D=0;R()}),1e3))}
function K(){if(st>=0){var l=L-(N()-st);l>0?T=setTimeout(G(K),l+1):A("viewable")&&R()}}
function C(){var v=d.visibilityState=="visible",k=v&&ar>0&&r>=(ar<242500?.5:.3),t=N(),m=Math.round(r*100);
if(v&&m>mx)mx=m;
if(k&&st<0){st=t;S.viewable||(T=setTimeout(G(K),L))}
else if(!k&&st>=0){B=Math.max(B,t-st);st=-1;clearTimeout(T)}}
function end(){R(1);done=1;io&&io.disconnect();[T,H,D,F].forEach(clearTimeout)}
function go(){var el=id?d.getElementById(id):p;if(!el||io)return;
A("measurable");R();
io=new O(G(function(es){var e=es[es.length-1],b=e.boundingClientRect;r=e.isIntersecting?e.intersectionRatio:0;ar=b.width*b.height;C()}),{threshold:th});
io.observe(el);
on(el,"pointerenter",function(){clearTimeout(H);H=setTimeout(G(function(){E("hover")}),500)});
on(el,"pointerleave",function(){clearTimeout(H)});
on(el,"adevents:engage",function(e){e=e.detail;typeof e=="string"&&/^(click|expand|play|pause|complete)$/.test(e)&&E(e)});
on(d,"visibilitychange",function(){C();d.visibilityState=="hidden"&&R(1)});
on(w,"pagehide",end)}
F=setTimeout(G(end),59e4);
id&&!d.getElementById(id)&&d.readyState=="loading"?on(d,"DOMContentLoaded",go):go();
}catch(_){}})();
